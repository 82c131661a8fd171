"""Message echo: decodes every rl_traj_ros message type with the conversion layer, re-encodes
it and publishes it back on ``echo_out/<Type>``. A wire-contract check between two real
processes, used by the smoke pipeline and the round-trip tests."""
import sys

import rclpy
from rclpy.node import Node

from rl_traj_ros import msg as M
from rl_traj_ros.ros import conversion as cv
from rl_traj_ros.ros.qos import DATA_QOS

CODECS = {
    'PolicyPart': (M.PolicyPart, cv.policy_part_from_msg, cv.policy_part_to_msg),
    'EnvPart': (M.EnvPart, cv.env_part_from_msg, cv.env_part_to_msg),
    'PolicyInput': (M.PolicyInput, cv.policy_input_from_msg, cv.policy_input_to_msg),
    'ActionChunk': (M.ActionChunk, cv.action_chunk_from_msg, cv.action_chunk_to_msg),
    'Trajectory': (M.Trajectory, cv.trajectory_from_msg, cv.trajectory_to_msg),
    'Intervention': (M.Intervention, lambda m: m, lambda m: m),
}


class Echo(Node):
    def __init__(self):
        super().__init__('rl_traj_ros_echo')
        self._pubs = {}
        for name, (typ, dec, enc) in CODECS.items():
            pub = self.create_publisher(typ, f'echo_out/{name}', DATA_QOS)
            self._pubs[name] = pub
            self.create_subscription(typ, f'echo_in/{name}', lambda m, p=pub, d=dec, e=enc: self._echo(m, p, d, e),
                                     DATA_QOS)

    def _echo(self, m, pub, dec, enc):
        out = enc(dec(m))
        if hasattr(m, 'header'):
            out.header = m.header
        if hasattr(m, 'model_version'):
            out.model_version = m.model_version
        pub.publish(out)


def main():
    rclpy.init()
    node = Echo()
    print('ready', flush=True)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
