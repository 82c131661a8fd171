"""gello_teleop_node: a GELLO leader arm (Dynamixel servos) as a human intervention source.

Reads the leader with one GroupSyncRead per cycle, maps servo angles to Franka joints
(``joint_offsets``, ``joint_signs``; ``python -m rl_traj_ros.teleop.gello calibrate`` finds
the offsets), computes the leader's TCP with Pinocchio FR3 kinematics and publishes the
expert delta action from the follower's current TCP (from ``follower_joint_states``) as an
Intervention, plus the leader's joints as sensor_msgs/JointState. The operator's hands are on the
leader, so a foot switch (``label_device``, ``teleop.pedal``) labels the episode: an EpisodeEvent
on ``episode_event`` per press of a ``label_keys`` key.
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

import time
from typing import Optional

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState

from .. import msg as M
from ..params.teleop_nodes import GELLO_NODE
from ..ros.qos import EVENT_QOS, SIDE_QOS, TELEOP_QOS
from ..ros.run_link import RunLink
from ..teleop.gello import FrankaKinematics, GelloConfig, GelloReader, GelloTeleop
from ..teleop.pedal import KeyDevice, KeyLabels
from .common import declare, run_node, topic

JOINT_NAMES = [f'fr3_joint{i}' for i in range(1, 8)]


class GelloTeleopNode(Node):
    def __init__(self):
        super().__init__('gello_teleop_node')
        p = declare(self, GELLO_NODE)
        self.p, self.link = p, RunLink(self, p)
        self.reader = GelloReader(GelloConfig(p['port'], p['baudrate'], list(p['joint_ids']), list(p['joint_offsets']),
                                              list(p['joint_signs']), p['gripper_id'], p['gripper_open_rad'],
                                              p['gripper_closed_rad']))
        self.kin = FrankaKinematics()
        self.teleop = GelloTeleop(self.kin, p['pos_scale'], p['rot_scale'], p['deadzone'], p['latch_s'],
                                  p['no_gripper'])
        self.follower_tcp: Optional[np.ndarray] = None
        self.pub = self.link.publisher(M.Intervention, topic(self, 'intervention'), TELEOP_QOS)
        self.pub_joints = self.create_publisher(JointState, 'gello/joint_states', SIDE_QOS)
        self.create_subscription(JointState, p['follower_joint_states'], self.on_follower, SIDE_QOS)
        self.keys = KeyLabels(p['label_keys'])
        self.pedal = KeyDevice(p['label_device']) if p['label_device'] else None
        self.pub_event = self.link.publisher(M.EpisodeEvent, topic(self, 'episode_event'), EVENT_QOS)
        self.create_timer(1.0 / p['rate_hz'], self.tick)
        self.read_errors = self.pedal_errors = 0

    def on_follower(self, m: JointState) -> None:
        # the env node's joint states carry its run id in frame_id (ros.side_topics): another run's robot is not ours
        if self.link.guard.admit(self.p['follower_joint_states'], m.header.frame_id) and len(m.position) >= 7:
            self.follower_tcp = self.kin.tcp(np.asarray(m.position[:7]))

    def tick(self) -> None:
        self.label()
        try:
            q, g = self.reader.read()
        except IOError as e:
            self.read_errors += 1
            self.get_logger().warning(f'leader read failed: {e}', throttle_duration_sec=2.0)
            return
        stamp = self.get_clock().now().to_msg()
        js = JointState(name=JOINT_NAMES + (['gripper'] if g is not None else []),
                        position=list(map(float, q)) + ([g] if g is not None else []))
        js.header.stamp = stamp
        self.pub_joints.publish(js)
        if self.follower_tcp is None:
            return  # no follower pose yet: a delta would be meaningless
        action, active = self.teleop.action(q, g, self.follower_tcp, time.monotonic())
        m = M.Intervention(source_device='gello', env_index=self.p['env_index'], action=action.tolist(),
                           active=active)
        m.header.stamp = stamp
        self.pub.publish(m)

    def label(self) -> None:
        if self.pedal is None:
            return
        try:
            pressed = self.keys.feed(self.pedal.read())
        except IOError as e:    # unplugged: the leader arm goes on, the labels are missed and said so
            self.pedal_errors += 1
            self.get_logger().error(f'label_device read failed: {e}', throttle_duration_sec=2.0)
            return
        for label, code in pressed:
            e = M.EpisodeEvent(source_device='gello', env_index=self.p['env_index'], label=int(label))
            e.header.stamp = self.get_clock().now().to_msg()
            self.pub_event.publish(e)
            self.get_logger().info(f'episode label {label.name.lower()} (key {code})')

    def shutdown(self) -> None:
        self.reader.close()
        if self.pedal is not None:
            self.pedal.close()


def main(args=None) -> int:
    return run_node(GelloTeleopNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
