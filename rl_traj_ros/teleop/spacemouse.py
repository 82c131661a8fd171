"""SpaceMouse -> expert action (spec §7), ROS-free.

The device side is pyspacemouse's own decoder (``SpaceMouseDevice``): on hardware it opens the
hidraw device; in tests and replays a ``ReplayHID`` feeds it recorded raw HID reports, so
the same decoding, axis convention and button parsing run in both cases. ``ButtonChord``: the
operator's episode labels from the two buttons held together.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np

from ..params.defaults import SPACEMOUSE
from ..rewards.labels import Label


class ReplayHID:
    """The HID device interface pyspacemouse reads from, fed with recorded raw reports.

    Reports are released by their recorded time offsets (``clock`` - start), so a replay has
    the device's timing; ``read`` returns one report per call, like hidapi.
    """

    product_string = 'SpaceMouse Compact (replay)'
    manufacturer_string = '3Dconnexion (replay)'
    release_number = 0
    serial_number = 'replay'

    def __init__(self, reports: Iterable[tuple[float, bytes]], clock: Callable[[], float] = time.monotonic,
                 realtime: bool = True):
        self._reports = sorted(reports, key=lambda r: r[0])
        self._clock, self._realtime = clock, realtime
        self._start: Optional[float] = None
        self._i = 0

    @classmethod
    def from_file(cls, path: str | Path, **kw) -> 'ReplayHID':
        """JSON lines: {"t": seconds, "report": "hex bytes"}."""
        rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
        return cls([(float(r['t']), bytes.fromhex(r['report'])) for r in rows], **kw)

    def open(self) -> None:
        """The recording's clock starts at the first read, not here: the reader decides when."""

    def close(self) -> None:
        pass

    def set_nonblocking(self, flag: bool) -> None:
        pass

    def write(self, data) -> int:
        return len(data)

    def read(self, size: int = 64, timeout: int = 0) -> bytes:
        if self._start is None:
            self._start = self._clock()
        if self._i >= len(self._reports):
            return b''
        t, report = self._reports[self._i]
        if self._realtime and self._clock() - self._start < t:
            return b''
        self._i += 1
        return report[:size]

    @property
    def exhausted(self) -> bool:
        return self._i >= len(self._reports)


class SocketHID(ReplayHID):
    """Raw HID reports arriving as UDP datagrams on localhost (a scripted operator, or a
    recorder on another machine relaying a real device): the same decoder reads them."""

    product_string = 'SpaceMouse Compact (socket)'

    def __init__(self, port: int, host: str = '127.0.0.1'):
        import socket
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((host, port))
        self._sock.setblocking(False)

    def open(self) -> None:
        pass

    def close(self) -> None:
        self._sock.close()

    def read(self, size: int = 64, timeout: int = 0) -> bytes:
        try:
            return self._sock.recv(64)[:size]
        except BlockingIOError:
            return b''


def open_device(replay: Optional[ReplayHID] = None, device_name: str = SPACEMOUSE.device_name):
    """A pyspacemouse SpaceMouseDevice: on the replay, or the first connected device."""
    import pyspacemouse
    from pyspacemouse import AxisConvention, SpaceMouseDevice, apply_axis_convention, get_device_specs
    if replay is None:
        try:
            dev = pyspacemouse.open(nonblocking=True, axis_convention=AxisConvention.HID_Z_UP)
        except Exception as e:  # noqa: BLE001 - pyspacemouse's messages do not say what to check
            raise RuntimeError(f'no SpaceMouse: {e} (is it plugged in, and /dev/hidraw* readable? hid_udp_port > 0 '
                               'takes raw reports from UDP instead)') from e
        if not dev:
            raise RuntimeError('no SpaceMouse found (is it plugged in, and /dev/hidraw* readable?)')
        return dev
    info = apply_axis_convention(get_device_specs()[device_name], AxisConvention.HID_Z_UP)
    dev = SpaceMouseDevice(info=info, device=replay)
    dev.open()
    return dev


def drain(device, max_reports: int = 256):
    """Read every pending report (pyspacemouse's read() consumes at most one per call), so
    the command never lags behind the device."""
    state = device.read()
    for _ in range(max_reports):
        t = state.t
        state = device.read()
        if state.t == t:
            break
    return state


@dataclass
class SpaceMouseTeleop:
    """Device state -> ``[-y, x, z, -roll, -pitch, -yaw(, gripper)]`` with the activity latch."""

    deadzone: float = SPACEMOUSE.deadzone
    latch_s: float = SPACEMOUSE.latch_s
    scale: float = 1.0
    no_gripper: bool = SPACEMOUSE.no_gripper

    def __post_init__(self) -> None:
        self._last_active: Optional[float] = None
        self._gripper = -1.0  # open until the left button closes it

    def action(self, state, now: float) -> tuple[np.ndarray, bool, int]:
        """(expert action, active, buttons bitmask)."""
        motion = np.array([-state.y, state.x, state.z, -state.roll, -state.pitch, -state.yaw], np.float64)
        buttons = list(getattr(state, 'buttons', []) or [])
        pressed = any(buttons)
        if not (len(buttons) > 1 and buttons[0] and buttons[1]):   # both at once: the label chord
            if len(buttons) > 0 and buttons[0]:
                self._gripper = 1.0    # left: close
            if len(buttons) > 1 and buttons[1]:
                self._gripper = -1.0   # right: open
        if np.linalg.norm(motion) > self.deadzone or pressed:
            self._last_active = now
        active = self._last_active is not None and now - self._last_active <= self.latch_s
        a = np.clip(motion * self.scale, -1.0, 1.0)
        if not self.no_gripper:
            a = np.append(a, self._gripper)
        mask = sum(1 << i for i, b in enumerate(buttons) if b)
        return a.astype(np.float32), bool(active), int(mask)


@dataclass
class ButtonChord:
    """The operator's episode label from the SpaceMouse's two buttons, held together and released:
    shorter than ``failure_s`` is *success*, up to ``rerecord_s`` *failure*, longer *re-record*
    (HIL-SERL's success / failure / re-record keys, on a device with two buttons and no keyboard
    at hand). The label goes out on release, once both buttons are up, so a held chord is one
    label; a single button (the gripper) never is one."""

    failure_s: float = SPACEMOUSE.label_failure_s
    rerecord_s: float = SPACEMOUSE.label_rerecord_s

    def __post_init__(self) -> None:
        if not 0.0 < self.failure_s < self.rerecord_s:
            raise ValueError(f'label_failure_s ({self.failure_s}) must be > 0 and below label_rerecord_s '
                             f'({self.rerecord_s})')
        self._since: Optional[float] = None

    def update(self, state, now: float) -> Label:
        buttons = list(getattr(state, 'buttons', []) or [])
        if self._since is None:
            if len(buttons) > 1 and buttons[0] and buttons[1]:
                self._since = now
            return Label.NONE
        if any(buttons):
            return Label.NONE
        held, self._since = now - self._since, None
        return Label.SUCCESS if held < self.failure_s else Label.FAILURE if held < self.rerecord_s else Label.RERECORD

