"""What the env node shows beside the data path: env 0's joints and front camera.

``joint_states`` (``sensor_msgs/JointState``, every request: what a GELLO follower and rviz
read) and ``camera/front`` (``sensor_msgs/Image``, at ``rate_hz``; 0: off). Plain sensor_msgs,
so the run id rides in ``header.frame_id`` of the joint states: a GELLO node computes its
commands from its own run's robot, not from a neighbour's on the same topic.
"""
from __future__ import annotations

import time

from sensor_msgs.msg import Image, JointState

from .images import rgb_image_msg
from .qos import SIDE_QOS

JOINT_NAMES = [f'fr3_joint{i}' for i in range(1, 8)]


class SideTopics:
    def __init__(self, node, rate_hz: float, frame_id: str, run_id: str):
        self.node, self.rate_hz, self.frame_id, self.run_id = node, rate_hz, frame_id, run_id
        self.pub_cam = node.create_publisher(Image, 'camera/front', SIDE_QOS)
        self.pub_joints = node.create_publisher(JointState, 'joint_states', SIDE_QOS)
        self.joints: list[int] = []   # where the joint positions are in the states (assembly.joint_positions)
        self._last_cam = 0.0

    def __call__(self, req) -> None:
        """Publish env 0's part of a request's observation."""
        stamp = self.node.get_clock().now().to_msg()
        if 'states' in req.obs and self.joints:
            s = req.obs['states'][0]
            m = JointState(name=JOINT_NAMES, position=[float(s[i]) for i in self.joints])
            m.header.stamp, m.header.frame_id = stamp, self.run_id
            self.pub_joints.publish(m)
        if self.rate_hz > 0 and 'main_images' in req.obs and time.monotonic() - self._last_cam >= 1.0 / self.rate_hz:
            self._last_cam = time.monotonic()
            self.pub_cam.publish(rgb_image_msg(req.obs['main_images'][0].numpy(), stamp, self.frame_id))
