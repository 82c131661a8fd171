"""spacemouse_teleop_node: a 3Dconnexion SpaceMouse as a human intervention source.

Every cycle (>= 100 Hz) it drains all pending HID reports through pyspacemouse's decoder and
publishes an Intervention: ``[-y, x, z, -roll, -pitch, -yaw]`` (x ``action_scale``, clipped
to [-1, 1]) plus the gripper (left button closes, right opens) unless ``no_gripper``; active
while the motion exceeds the deadzone or a button is held, and for ``latch_s`` after.
BEST_EFFORT depth 1 with stamps: the env applies only fresh commands. Both buttons held together
and released end the episode with the operator's label (``ButtonChord``: short success, longer
failure, longest re-record), an EpisodeEvent on ``episode_event`` (reliable: one event).
``replay_file`` replays recorded raw HID reports instead of opening the device, from the moment
a subscriber is matched, plus ``REPLAY_SETTLE_S`` (a recording is short: played before discovery
it would reach nobody, and the reader matches this writer up to a discovery round after this
writer matched it: best-effort samples sent in between are dropped by the reader).
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

import time

from rclpy.node import Node

from .. import msg as M
from ..params.teleop_nodes import SPACEMOUSE_NODE
from ..rewards.labels import Label
from ..ros.qos import EVENT_QOS, TELEOP_QOS
from ..ros.run_link import RunLink
from ..teleop.spacemouse import ButtonChord, ReplayHID, SocketHID, SpaceMouseTeleop, drain, open_device
from .common import declare, run_node, topic


REPLAY_SETTLE_S = 1.0


class SpaceMouseTeleopNode(Node):
    def __init__(self):
        super().__init__('spacemouse_teleop_node')
        p = declare(self, SPACEMOUSE_NODE)
        if p['rate_hz'] <= 0:
            raise ValueError('rate_hz must be > 0')
        self.p, self.link = p, RunLink(self, p)
        replay = (ReplayHID.from_file(p['replay_file']) if p['replay_file']
                  else SocketHID(p['hid_udp_port']) if p['hid_udp_port'] else None)
        self.device = open_device(replay, p['device_name'])
        self.teleop = SpaceMouseTeleop(p['deadzone'], p['latch_s'], p['action_scale'], p['no_gripper'])
        self.pub = self.link.publisher(M.Intervention, topic(self, 'intervention'), TELEOP_QOS)
        self.chord = ButtonChord(p['label_failure_s'], p['label_rerecord_s'])
        self.pub_event = self.link.publisher(M.EpisodeEvent, topic(self, 'episode_event'), EVENT_QOS)
        self.create_timer(1.0 / p['rate_hz'], self.tick)
        self.published, self.matched_at = 0, None

    def tick(self) -> None:
        if self.p['replay_file'] and not self.published:
            if self.matched_at is None and self.pub.get_subscription_count():
                self.matched_at = time.monotonic()
            if self.matched_at is None or time.monotonic() - self.matched_at < REPLAY_SETTLE_S:
                return
        state = drain(self.device)
        action, active, buttons = self.teleop.action(state, time.monotonic())
        m = M.Intervention(source_device='spacemouse', env_index=self.p['env_index'], action=action.tolist(),
                           active=active, buttons=buttons)
        m.header.stamp = self.get_clock().now().to_msg()
        self.pub.publish(m)
        self.published += 1
        label = self.chord.update(state, time.monotonic())
        if label != Label.NONE:
            e = M.EpisodeEvent(source_device='spacemouse', env_index=self.p['env_index'], label=int(label))
            e.header.stamp = m.header.stamp
            self.pub_event.publish(e)
            self.get_logger().info(f'episode label {label.name.lower()} (button chord)')

    def shutdown(self) -> None:
        self.device.close()


def main(args=None) -> int:
    return run_node(SpaceMouseTeleopNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
