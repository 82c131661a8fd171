"""GELLO: a Protocol 2.0 servo emulator on a pty read by the real dynamixel-sdk; known joint
angles give the expected Franka joints, TCP pose and delta action."""
import math
import time
from contextlib import contextmanager

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import JointState

pytest.importorskip('dynamixel_sdk')
pytest.importorskip('pinocchio')

from rl_traj_ros import msg as M  # noqa: E402
from rl_traj_ros.ros.qos import SIDE_QOS, TELEOP_QOS  # noqa: E402
from dxl_emulator import DynamixelEmulator  # noqa: E402
from rl_traj_ros.teleop.gello import (HOME, FrankaKinematics, GelloConfig, GelloReader, GelloTeleop,  # noqa: E402
                                      calibrate_offsets)

from rosutil import ros_process  # noqa: E402

SIGNS = [1, 1, 1, 1, 1, -1, 1]
OFFSETS = [math.pi / 2, 0.0, -math.pi, 0.0, math.pi / 2, 0.0, math.pi]


def leader_pose(emu, q, gripper_deg=195.0):
    """Put the emulated leader where a Franka pose q reads through OFFSETS and SIGNS."""
    emu.set_positions_rad({i + 1: q[i] * SIGNS[i] + OFFSETS[i] for i in range(7)})
    emu.set_positions_rad({8: math.radians(gripper_deg)})


@contextmanager
def gello_node(emu, context, *params):
    """The GELLO node on the emulated leader (``OFFSETS``) with ``params`` (``name:=value``), and a
    listener node of this test with its executor."""
    args = ['-m', 'rl_traj_ros.nodes.gello_teleop_node', '--ros-args', '-p', f'port:={emu.port}',
            '-p', f'joint_offsets:={OFFSETS}', *[a for v in params for a in ('-p', v)]]
    with ros_process(args) as proc:
        node = rclpy.create_node('gello_listener', context=context)
        ex = SingleThreadedExecutor(context=context)
        ex.add_node(node)
        try:
            yield proc, node, ex
        finally:
            ex.shutdown()
            node.destroy_node()


@pytest.fixture
def emu():
    e = DynamixelEmulator(range(1, 9))
    yield e
    e.close()


def test_reader_maps_servo_angles_to_franka_joints(emu):
    q_true = np.array([0.1, -0.3, 0.05, -2.0, 0.2, 1.9, 0.7])
    leader_pose(emu, q_true, gripper_deg=152.0)
    r = GelloReader(GelloConfig(port=emu.port, joint_offsets=OFFSETS, joint_signs=SIGNS))
    q, g = r.read()
    assert np.allclose(q, q_true, atol=2 * math.pi / 4096)  # one tick of quantization
    assert g == pytest.approx(1.0)  # trigger at the closed angle
    r.close()


def test_calibration_recovers_offsets(emu):
    leader_pose(emu, HOME)
    r = GelloReader(GelloConfig(port=emu.port, joint_signs=SIGNS))
    offsets = calibrate_offsets(r.raw_rad(), HOME, SIGNS)
    r.close()
    assert np.allclose(offsets, OFFSETS)


def test_delta_action_from_leader_and_follower():
    k = FrankaKinematics()
    home = k.tcp(HOME)
    assert np.allclose(home[:3, 3], [0.5544, 0.0, 0.5214], atol=1e-3)  # franky-sim's reported EE pose
    tele = GelloTeleop(k, pos_scale=0.05, rot_scale=0.2)
    q = np.array(HOME)
    q[0] += 0.1  # base joint: the TCP swings about z
    a, active = tele.action(q, 0.0, home, now=0.0)
    r = math.hypot(*home[:2, 3])
    assert a[0] == pytest.approx(-(r * (1 - math.cos(0.1))) / 0.05, abs=1e-3)
    assert a[1] == 1.0  # r*sin(0.1)/0.05 = 1.1 -> clipped
    assert a[5] == pytest.approx(0.1 / 0.2, abs=1e-3) and a[6] == -1.0 and active
    a, active = tele.action(np.array(HOME), 0.7, home, now=0.3)
    assert np.allclose(a[:6], 0, atol=1e-6) and a[6] == 1.0 and active  # latched 0.5 s
    a, active = tele.action(np.array(HOME), 0.7, home, now=0.9)
    assert not active


def test_node_publishes_intervention_and_joint_states(emu, rclpy_context):
    leader_pose(emu, np.array(HOME) + np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3]))
    with gello_node(emu, rclpy_context, 'follower_joint_states:=/test/follower') as (_, node, ex):
        got, joints = [], []
        node.create_subscription(M.Intervention, '/rl_traj/intervention', got.append, TELEOP_QOS)
        node.create_subscription(JointState, '/gello/joint_states', joints.append, SIDE_QOS)
        follower = node.create_publisher(JointState, '/test/follower', SIDE_QOS)

        def publish_follower():
            follower.publish(JointState(name=[f'fr3_joint{i}' for i in range(1, 8)], position=list(HOME)))
            ex.spin_once(timeout_sec=0.02)
            return len(got) >= 20
        deadline = time.time() + 30
        while not publish_follower() and time.time() < deadline:
            pass
    assert len(got) >= 20 and joints
    assert np.allclose(joints[-1].position[:7], np.array(HOME) + [0, 0, 0, 0, 0, 0, 0.3], atol=2e-3)
    a = np.array(got[-1].action)
    assert got[-1].source_device == 'gello' and got[-1].active
    # joint 7 turns the hand about its own axis, which points down at home: -z in the base frame,
    # -0.3 rad / 0.2 rad per unit -> clipped to -1; no translation
    assert a[5] == -1.0 and np.allclose(a[:5], 0, atol=0.02)


def _key(code: int, value: int) -> bytes:
    """One struct input_event as the kernel writes it (EV_KEY), then its EV_SYN report."""
    from rl_traj_ros.teleop.pedal import EV_KEY, EVENT
    t = time.time()
    return EVENT.pack(int(t), int(t % 1 * 1e6), EV_KEY, code, value) + EVENT.pack(int(t), 0, 0, 0, 0)


def test_foot_switch_keys_are_labels_once_per_press():
    """A press is one label (auto-repeat, release, other keys and non-key events are not); a
    record split across reads waits for its rest; label_keys must be 3 distinct codes."""
    from rl_traj_ros.rewards.labels import Label
    from rl_traj_ros.teleop.pedal import KeyLabels
    keys = KeyLabels([30, 48, 46])
    stream = _key(30, 1) + _key(30, 2) + _key(30, 2) + _key(30, 0) + _key(57, 1) + _key(46, 1) + _key(48, 1)
    got = keys.feed(stream[:37]) + keys.feed(stream[37:100]) + keys.feed(stream[100:])
    assert got == [(Label.SUCCESS, 30), (Label.RERECORD, 46), (Label.FAILURE, 48)] and keys.ignored == 1
    for bad in ([30, 30, 46], [30, 48], [30, 48, -1]):
        with pytest.raises(ValueError, match='label_keys must be 3 distinct key codes'):
            KeyLabels(bad)


def test_node_labels_the_episode_from_a_foot_switch(emu, rclpy_context, tmp_path):
    """The GELLO node with ``label_device`` (a FIFO that the kernel's input_event records are
    written to: an evdev node reads the same): KEY_S then KEY_R pressed -> EpisodeEvents success,
    re-record on ``episode_event``, while the leader's interventions go on; a device that cannot be
    opened is refused at start, naming label_device and the path."""
    import os
    import subprocess
    import sys
    from rl_traj_ros.rewards.labels import Label
    from rl_traj_ros.ros.qos import EVENT_QOS
    from rosutil import ROOT
    leader_pose(emu, np.array(HOME))
    fifo = tmp_path / 'pedal'
    os.mkfifo(fifo)
    with gello_node(emu, rclpy_context, f'label_device:={fifo}') as (proc, node, ex):
        events, joints = [], []
        node.create_subscription(M.EpisodeEvent, '/rl_traj/episode_event', events.append, EVENT_QOS)
        node.create_subscription(JointState, '/gello/joint_states', joints.append, SIDE_QOS)
        deadline = time.time() + 30
        while not (joints and node.count_publishers('/rl_traj/episode_event')) and time.time() < deadline:
            ex.spin_once(timeout_sec=0.05)
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)   # the node holds the reading end
        os.write(fd, _key(31, 1) + _key(31, 0) + _key(57, 1))
        time.sleep(0.3)
        os.write(fd, _key(19, 1) + _key(19, 2))
        while len(events) < 2 and time.time() < deadline:
            ex.spin_once(timeout_sec=0.05)
        read = len(joints)
        while len(joints) <= read and time.time() < deadline:   # the leader is read on after the labels
            ex.spin_once(timeout_sec=0.05)
        os.close(fd)
    said = proc.stdout.read()
    assert [(e.label, e.source_device) for e in events] == [(int(Label.SUCCESS), 'gello'), (int(Label.RERECORD), 'gello')]
    assert 'episode label success (key 31)' in said and 'episode label rerecord (key 19)' in said, said[-2000:]
    assert len(joints) > read
    missing = tmp_path / 'no_such_pedal'
    bad = subprocess.run([sys.executable, '-m', 'rl_traj_ros.nodes.gello_teleop_node', '--ros-args', '-p',
                          f'port:={emu.port}', '-p', f'label_device:={missing}'], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and f"label_device '{missing}' cannot be opened" in bad.stdout + bad.stderr, \
        (bad.stdout + bad.stderr)[-2000:]
