"""A scripted operator: watches the follower's joints, computes its TCP (Pinocchio FR3) and
moves a virtual SpaceMouse toward a target by sending raw HID reports (UDP) that the
spacemouse node decodes with pyspacemouse, exactly like a real device's. An optional 5th argument,
a run id, makes it watch only that run's robot (the env node's joint states carry it in frame_id),
as a person watches the robot in front of them. ``--label-at-target``: once the TCP has held the
target for ``HOLD_S``, the operator presses both buttons for ``CHORD_S`` and releases them (the
episode label success, rl_traj_ros.teleop.spacemouse.ButtonChord), then waits for the robot to
leave the target (the reset) before the next."""
import socket
import sys
import time

import numpy as np
import rclpy
from pyspacemouse import AxisConvention, apply_axis_convention, get_device_specs
from sensor_msgs.msg import JointState

from rl_traj_ros.ros.qos import SIDE_QOS
from rl_traj_ros.teleop.gello import FrankaKinematics

INFO = apply_axis_convention(get_device_specs()['SpaceMouseCompact'], AxisConvention.HID_Z_UP)


def report(values: dict) -> bytes:
    """Raw report carrying the decoded axis values (inverse of pyspacemouse's scaling)."""
    channel = INFO.mappings[next(iter(values))].channel
    data = bytearray(7)
    data[0] = channel
    for axis, v in values.items():
        spec = INFO.mappings[axis]
        raw = int(np.clip(round(v * INFO.axis_scale / spec.scale), -350, 350)) & 0xFFFF
        data[spec.byte1], data[spec.byte2] = raw & 0xFF, raw >> 8
    return bytes(data)


HOLD_S, CHORD_S = 1.0, 0.3
BOTH, NONE = bytes.fromhex('030300'), bytes.fromhex('030000')


def main():
    argv = [a for a in sys.argv if a != '--label-at-target']
    label = len(argv) != len(sys.argv)
    port, target = int(argv[1]), np.array([float(x) for x in argv[2:5]])
    run = argv[5] if len(argv) > 5 else None
    at_target_since, armed = None, True
    rclpy.init()
    node = rclpy.create_node('scripted_operator')
    kin = FrankaKinematics()
    state = {}
    node.create_subscription(JointState, '/env_0/joint_states', lambda m: state.__setitem__('q', list(m.position))
                             if run is None or m.header.frame_id == run else None, SIDE_QOS)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    print('ready', flush=True)
    while rclpy.ok():
        rclpy.spin_once(node, timeout_sec=0.02)
        if 'q' not in state:
            continue
        err = target - kin.tcp(state['q'])[:3, 3]
        a = np.zeros(3) if np.linalg.norm(err) < 0.006 else np.clip(err / 0.05, -1, 1)
        if label:
            near = np.linalg.norm(err) < 0.02
            armed = armed or np.linalg.norm(err) > 0.05   # the robot went home: a new episode
            at_target_since = (at_target_since or time.monotonic()) if near else None
            if armed and at_target_since is not None and time.monotonic() - at_target_since > HOLD_S:
                sock.sendto(BOTH, ('127.0.0.1', port))
                time.sleep(CHORD_S)
                sock.sendto(NONE, ('127.0.0.1', port))
                print('label: success (both buttons)', flush=True)
                armed, at_target_since = False, None
        # the teleop maps device (x, y, z) to actions [-y, x, z]
        sock.sendto(report({'x': a[1], 'y': -a[0], 'z': a[2]}), ('127.0.0.1', port))
        sock.sendto(report({'roll': 0.0, 'pitch': 0.0, 'yaw': 0.0}), ('127.0.0.1', port))
        time.sleep(0.02)


if __name__ == '__main__':
    main()
