"""An attacker on the run's topics (test_run_isolation): answers each of the env's requests at once,
before the run's policy node can, with chunks the env must not execute: one of another run, one
unsigned, one signed with a wrong secret (all-ones actions of the right shape), and one signed with
the run's own secret but of the wrong shape. Prints 'ready', and at exit how many of each it sent."""
import argparse
import sys

import numpy as np
import rclpy
from rclpy.node import Node

from rl_traj_ros import msg as M
from rl_traj_ros.delivery.run_guard import RunGuard, read_secret
from rl_traj_ros.ros.run_link import canonical
from rl_traj_ros.ros.qos import DATA_QOS


class Forger(Node):
    def __init__(self, run_id: str, secret: bytes, chunk: int, action_dim: int):
        super().__init__('forger')
        self.run_id, self.chunk, self.action_dim = run_id, chunk, action_dim
        self.own = RunGuard(run_id, secret, True, print)
        self.wrong = RunGuard(run_id, b'\x01' * 32, True, print)
        self.sent = {'wrong_shape': 0, 'foreign': 0, 'unsigned': 0, 'forged': 0}
        self.pub = self.create_publisher(M.ActionChunk, '/rl_traj/action_chunk', DATA_QOS)
        self.create_subscription(M.PolicyInput, '/rl_traj/policy_input', self.on_request, DATA_QOS)

    def chunk_msg(self, req: M.PolicyInput, run_id: str, cols: int) -> M.ActionChunk:
        states = next(t for t in req.obs.tensors if t.name == 'states')
        m = M.ActionChunk(sources=list(req.sources), run_id=run_id, model_version=0)
        m.header.stamp = self.get_clock().now().to_msg()
        m.actions.name, m.actions.dtype, m.actions.shape = 'actions', 'float32', [int(states.shape[0]), cols]
        m.actions.data = np.ones((int(states.shape[0]), cols), np.float32).tobytes()
        return m

    def on_request(self, req: M.PolicyInput) -> None:
        if not req.sources:
            return
        right = self.chunk * self.action_dim
        m = self.chunk_msg(req, self.run_id, right + 1)   # the run's own signature, the wrong shape
        m.auth = self.own.sign(canonical(m))
        self.pub.publish(m)
        self.sent['wrong_shape'] += 1
        self.pub.publish(self.chunk_msg(req, 'another-run', right))
        self.sent['foreign'] += 1
        self.pub.publish(self.chunk_msg(req, self.run_id, right))
        self.sent['unsigned'] += 1
        m = self.chunk_msg(req, self.run_id, right)
        m.auth = self.wrong.sign(canonical(m))
        self.pub.publish(m)
        self.sent['forged'] += 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--run-id', required=True)
    ap.add_argument('--secret-file', required=True)
    ap.add_argument('--chunk', type=int, default=4)
    ap.add_argument('--action-dim', type=int, default=7)
    args = ap.parse_args()
    rclpy.init()
    node = Forger(args.run_id, read_secret(args.secret_file), args.chunk, args.action_dim)
    print('ready', flush=True)
    try:
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    finally:
        print('sent ' + ' '.join(f'{k}={v}' for k, v in node.sent.items()), flush=True)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
