"""SpaceMouse teleop: recorded raw HID reports through pyspacemouse's own decoder."""
import time
from pathlib import Path

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor

pytest.importorskip('pyspacemouse')

from rl_traj_ros import msg as M  # noqa: E402
from rl_traj_ros.ros.qos import TELEOP_QOS  # noqa: E402
from rl_traj_ros.teleop.spacemouse import ReplayHID, SpaceMouseTeleop, drain, open_device  # noqa: E402

from rosutil import ros_process, spin_until  # noqa: E402

FIXTURE = Path(__file__).parent / 'fixtures' / 'spacemouse_push_roll_click.jsonl'


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_decoded_actions_latch_and_buttons():
    clock = Clock()
    dev = open_device(ReplayHID.from_file(FIXTURE, clock=clock))
    tele = SpaceMouseTeleop()
    out = {}
    for step in range(60):  # 100 Hz cycles over 0.6 s of recording
        clock.t = step * 0.01
        out[step] = tele.action(drain(dev), clock.t)
    a, active, buttons = out[19]  # push +x at full scale (report x = 340/350)
    assert active and buttons == 0
    assert a[1] == pytest.approx(340 / 350, abs=1e-6) and a[0] == pytest.approx(0.0)  # [-y, x, ...]
    assert a[6] == -1.0  # gripper open until the left button
    a, active, _ = out[25]
    assert a[3] == pytest.approx(-0.5, abs=1e-6)  # -roll (175/350)
    a, active, _ = out[33]  # motion released at 0.30 s, but within the 0.5 s latch
    assert np.allclose(a[:6], 0) and active
    a, active, buttons = out[36]  # left click at 0.35 s: gripper closes, buttons bit 0
    assert buttons == 1 and a[6] == 1.0 and active
    a, active, buttons = out[50]  # released at 0.45 s; gripper stays closed; latched until 0.95 s
    assert buttons == 0 and a[6] == 1.0 and active
    clock.t = 1.0
    a, active, _ = tele.action(drain(dev), clock.t)
    assert not active  # 0.5 s after the last activity


def test_drain_reads_every_pending_report():
    dev = open_device(ReplayHID.from_file(FIXTURE, realtime=False))
    state = drain(dev)  # all 34 reports are pending: the state is the final one, not the first
    assert state.x == 0 and state.roll == 0 and list(state.buttons) == [0, 0]
    assert dev._device.exhausted


def test_no_gripper_is_six_dimensional():
    dev = open_device(ReplayHID.from_file(FIXTURE, realtime=False))
    a, _, _ = SpaceMouseTeleop(no_gripper=True).action(drain(dev), 0.0)
    assert a.shape == (6,)


def test_node_publishes_stamped_interventions_at_100_hz(rclpy_context):
    # the listener first: the replay plays from the node's start, and a listener that joins later
    # (discovery is slower on a loaded machine) misses its first reports
    node = rclpy.create_node('sm_listener', context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    got = []
    node.create_subscription(M.Intervention, '/rl_traj/intervention', lambda m: got.append((time.monotonic(), m)),
                             TELEOP_QOS)
    try:
        with ros_process(['-m', 'rl_traj_ros.nodes.spacemouse_teleop_node', '--ros-args', '-p',
                          f'replay_file:={FIXTURE}']):
            assert spin_until(ex, lambda: len(got) >= 150, 30)
    finally:
        ex.shutdown()
        node.destroy_node()
    span = got[-1][0] - got[50][0]
    rate = (len(got) - 51) / span
    assert rate >= 80, rate  # >= 100 Hz nominal; allow scheduling jitter on a loaded 2-core machine
    msgs = [m for _, m in got]
    assert all(m.source_device == 'spacemouse' and len(m.action) == 7 for m in msgs)
    assert all(m.header.stamp.sec > 0 for m in msgs)
    assert any(m.active and m.action[1] > 0.5 for m in msgs)  # the push was replayed
    assert any(m.buttons == 1 and m.action[6] == 1.0 for m in msgs)  # the click closed the gripper
    assert not msgs[-1].active  # the recording ended > 0.5 s ago


def test_both_buttons_held_and_released_give_the_operators_episode_label():
    """Raw button reports through pyspacemouse's decoder: a short chord is success, a longer one
    failure, the longest re-record; one label per chord, on release; a single button (the gripper)
    is none, and the gripper does not move on the chord itself."""
    from rl_traj_ros.rewards.labels import Label
    from rl_traj_ros.teleop.spacemouse import ButtonChord
    left, both, none = bytes.fromhex('030100'), bytes.fromhex('030300'), bytes.fromhex('030000')
    reports = [(0.0, left), (0.1, none),                    # a click: the gripper closes, no label
               (1.0, both), (1.4, none),                    # 0.4 s chord: success
               (2.0, left), (2.05, both), (3.5, left), (3.6, none),  # 1.55 s from both down: failure
               (5.0, both), (8.0, none)]                    # 3 s: re-record
    clock = Clock()
    dev = open_device(ReplayHID(reports, clock=clock))
    chord, tele = ButtonChord(1.0, 2.5), SpaceMouseTeleop()
    labels, grippers = [], set()
    for step in range(900):
        clock.t = step * 0.01
        state = drain(dev)
        a, _, _ = tele.action(state, clock.t)
        if 1.0 <= clock.t < 1.4:
            grippers.add(float(a[6]))
        label = chord.update(state, clock.t)
        if label != Label.NONE:
            labels.append((round(clock.t, 2), label))
    assert labels == [(1.4, Label.SUCCESS), (3.6, Label.FAILURE), (8.0, Label.RERECORD)]
    assert grippers == {1.0}   # closed by the first click, held through the chord
    with pytest.raises(ValueError, match='label_failure_s'):
        ButtonChord(3.0, 2.0)
