"""GELLO leader arm -> expert end-effector delta (spec §7), ROS-free.

The leader's Dynamixel servos are read with one GroupSyncRead (present position, 4 bytes at
address 132); raw angles map to Franka joints as ``(raw - offset) * sign``; the gripper
servo maps linearly from its open to its closed angle onto [0, 1]. Forward kinematics of the
FR3 (TCP frame ``fr3_hand_tcp``) come from Pinocchio on the FR3 URDF that franky-sim ships,
not from hand-written matrices. The expert action is the pose delta from the follower's
current TCP to the leader's, divided by the env's action scale and clipped to [-1, 1].

Calibration (like GELLO's offset script): hold the leader in a known Franka pose and run
``python -m rl_traj_ros.teleop.gello calibrate --port P``: offsets are searched in steps of
pi/2 so that the mapped joints match the pose.
"""
from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ..params.defaults import GELLO

HOME = (0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.0)
ADDR_PRESENT_POSITION = 132


def _urdf_path() -> str:
    import franky_sim
    return os.path.join(os.path.dirname(franky_sim.__file__), 'assets', 'fr3.urdf')


class FrankaKinematics:
    """FR3 forward kinematics (Pinocchio) -> 4x4 TCP pose."""

    def __init__(self, urdf: Optional[str] = None, frame: str = 'fr3_hand_tcp'):
        import pinocchio as pin
        self._pin = pin
        self.model = pin.buildModelFromUrdf(urdf or _urdf_path())
        self.data = self.model.createData()
        if not self.model.existFrame(frame):
            raise ValueError(f'frame {frame!r} not in the URDF')
        self.frame = self.model.getFrameId(frame)

    def tcp(self, q: Sequence[float]) -> np.ndarray:
        full = np.zeros(self.model.nq)
        full[:7] = np.asarray(q, dtype=np.float64)[:7]
        self._pin.framesForwardKinematics(self.model, self.data, full)
        return self.data.oMf[self.frame].homogeneous.copy()

    def rotation_delta(self, r_from: np.ndarray, r_to: np.ndarray) -> np.ndarray:
        """Rotation vector (axis * angle, base frame) taking ``r_from`` to ``r_to``."""
        return self._pin.log3(r_to @ r_from.T)


@dataclass
class GelloConfig:
    port: str = GELLO.port
    baudrate: int = GELLO.baudrate
    joint_ids: list[int] = field(default_factory=lambda: list(range(1, 8)))
    joint_offsets: list[float] = field(default_factory=lambda: [0.0] * 7)
    joint_signs: list[float] = field(default_factory=lambda: [1, 1, 1, 1, 1, -1, 1])
    gripper_id: int = GELLO.gripper_id                    # <= 0: no gripper servo
    gripper_open_rad: float = math.radians(195.0)
    gripper_closed_rad: float = math.radians(152.0)


class GelloReader:
    """The leader arm over dynamixel-sdk (any Protocol 2.0 chain: hardware or the emulator)."""

    def __init__(self, cfg: GelloConfig):
        from dynamixel_sdk import GroupSyncRead, PacketHandler, PortHandler
        self.cfg = cfg
        self.port = PortHandler(cfg.port)
        if not self.port.openPort():
            raise OSError(f'cannot open Dynamixel port {cfg.port}')
        self.port.setBaudRate(cfg.baudrate)
        self.packets = PacketHandler(2.0)
        self.ids = list(cfg.joint_ids) + ([cfg.gripper_id] if cfg.gripper_id > 0 else [])
        self.sync = GroupSyncRead(self.port, self.packets, ADDR_PRESENT_POSITION, 4)
        for i in self.ids:
            if not self.sync.addParam(i):
                raise ValueError(f'duplicate Dynamixel id {i}')

    def raw_rad(self) -> np.ndarray:
        from dynamixel_sdk import COMM_SUCCESS
        result = self.sync.txRxPacket()
        if result != COMM_SUCCESS:
            raise IOError(f'GroupSyncRead failed: {self.packets.getTxRxResult(result)}')
        out = []
        for i in self.ids:
            if not self.sync.isAvailable(i, ADDR_PRESENT_POSITION, 4):
                raise IOError(f'no position from Dynamixel id {i}')
            v = self.sync.getData(i, ADDR_PRESENT_POSITION, 4)
            v = v - (1 << 32) if v >= 1 << 31 else v
            out.append((v - 2048) * math.pi / 2048)
        return np.array(out)

    def read(self) -> tuple[np.ndarray, Optional[float]]:
        """(Franka joint angles [7], gripper in [0, 1] (0 open) or None)."""
        raw = self.raw_rad()
        q = (raw[:7] - np.asarray(self.cfg.joint_offsets)) * np.asarray(self.cfg.joint_signs)
        g = None
        if self.cfg.gripper_id > 0:
            lo, hi = self.cfg.gripper_open_rad, self.cfg.gripper_closed_rad
            g = float(np.clip((raw[7] - lo) / (hi - lo), 0.0, 1.0))
        return q, g

    def close(self) -> None:
        self.port.closePort()


@dataclass
class GelloTeleop:
    """Leader joints + follower TCP -> expert delta action with the activity latch."""

    kinematics: FrankaKinematics
    pos_scale: float = GELLO.pos_scale      # metres per unit action (the env's action_scale)
    rot_scale: float = GELLO.rot_scale       # radians per unit action
    deadzone: float = GELLO.deadzone
    latch_s: float = GELLO.latch_s
    no_gripper: bool = GELLO.no_gripper

    def __post_init__(self) -> None:
        self._last_active: Optional[float] = None

    def action(self, leader_q: np.ndarray, gripper: Optional[float], follower_tcp: np.ndarray,
               now: float) -> tuple[np.ndarray, bool]:
        target = self.kinematics.tcp(leader_q)
        dpos = (target[:3, 3] - follower_tcp[:3, 3]) / self.pos_scale
        drot = self.kinematics.rotation_delta(follower_tcp[:3, :3], target[:3, :3]) / self.rot_scale
        a = np.clip(np.concatenate([dpos, drot]), -1.0, 1.0)
        if np.linalg.norm(a) > self.deadzone:
            self._last_active = now
        active = self._last_active is not None and now - self._last_active <= self.latch_s
        if not self.no_gripper:
            a = np.append(a, 1.0 if (gripper or 0.0) >= 0.5 else -1.0)  # binary, threshold 0.5
        return a.astype(np.float32), bool(active)


def calibrate_offsets(raw: np.ndarray, pose: Sequence[float], signs: Sequence[float]) -> list[float]:
    """Offsets (multiples of pi/2 within +-8 pi) that map the raw leader angles onto ``pose``."""
    candidates = np.arange(-16, 17) * (math.pi / 2)
    out = []
    for r, p, s in zip(raw[:7], pose, signs):
        errors = np.abs((r - candidates) * s - p)
        out.append(float(candidates[int(np.argmin(errors))]))
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description='GELLO tools')
    sub = ap.add_subparsers(dest='cmd', required=True)
    cal = sub.add_parser('calibrate', help='joint offsets for a leader held in a known pose')
    cal.add_argument('--port', required=True)
    cal.add_argument('--baudrate', type=int, default=57600)
    cal.add_argument('--pose', type=float, nargs=7, default=list(HOME))
    cal.add_argument('--signs', type=float, nargs=7, default=[1, 1, 1, 1, 1, -1, 1])
    cal.add_argument('--gripper-id', type=int, default=8)
    args = ap.parse_args(argv)
    reader = GelloReader(GelloConfig(port=args.port, baudrate=args.baudrate, joint_signs=args.signs,
                                     gripper_id=args.gripper_id))
    raw = reader.raw_rad()
    reader.close()
    offsets = calibrate_offsets(raw, args.pose, args.signs)
    print(f'joint_offsets: {[round(o, 6) for o in offsets]}')
    print(f'joint_signs: {list(args.signs)}')
    if args.gripper_id > 0:  # like GELLO: open = current - 0.2 deg, closed = current - 42 deg
        print(f'gripper_open_rad: {raw[7] - math.radians(0.2):.6f}')
        print(f'gripper_closed_rad: {raw[7] - math.radians(42):.6f}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
