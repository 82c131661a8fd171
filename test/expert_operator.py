"""A scripted human in the loop (HIL-SERL tests): watches the env's requests and, while the
policy strays (env 0's gripper more than ``--stray-m`` from the cube in xy), takes over with
the scripted pick-cube expert's action, published as an ``Intervention`` over DDS like a
SpaceMouse node's, as a node of the run it joins (its run id and secret: signed like the
run's own teleop nodes). Prints 'ready' once its publisher and subscription exist."""
import argparse
import sys

import numpy as np
import rclpy
from rclpy.node import Node

from rl_traj_ros import msg as M
from rl_traj_ros.policies.scripted import CUBE, TCP, PickCubeExpert
from rl_traj_ros.ros import conversion as cv
from rl_traj_ros.ros.qos import DATA_QOS, TELEOP_QOS
from rl_traj_ros.ros.run_link import RunLink


class ExpertOperator(Node):
    def __init__(self, stray_m: float, run_id: str, secret_file: str):
        super().__init__('expert_operator')
        self.expert, self.stray_m, self.took_over = PickCubeExpert(), stray_m, 0
        self.link = RunLink(self, {'run_id': run_id, 'secret_file': secret_file})
        self.pub = self.link.publisher(M.Intervention, '/rl_traj/intervention', TELEOP_QOS)
        self.link.subscription(M.PolicyInput, '/rl_traj/policy_input', self.on_request, DATA_QOS)

    def on_request(self, m: M.PolicyInput) -> None:
        req = cv.policy_input_from_msg(m)
        state = req.obs['states'][0].numpy()
        strays = float(np.linalg.norm(state[TCP][:2] - state[CUBE][:2])) > self.stray_m
        out = M.Intervention(source_device='scripted_expert', env_index=0, active=strays,
                             action=self.expert.act(state).astype(np.float32).tolist())
        out.header.stamp = self.get_clock().now().to_msg()
        self.pub.publish(out)
        self.took_over += int(strays)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--stray-m', type=float, default=0.1)
    ap.add_argument('--run-id', required=True)
    ap.add_argument('--secret-file', default='')
    args = ap.parse_args()
    rclpy.init()
    node = ExpertOperator(args.stray_m, args.run_id, args.secret_file)
    print('ready', flush=True)
    try:
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    finally:
        print(f'took over on {node.took_over} requests', flush=True)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
