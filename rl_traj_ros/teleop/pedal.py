"""The operator's episode labels from keys: a USB foot switch or a keyboard, read as Linux input events.

Why: a GELLO leader arm takes both of the operator's hands and has no button of its own, so HIL-SERL's
success / failure / re-record keys go to a foot switch. A foot switch (PCsensor FS20xx, Olympus
RS-28, a stage pedal) is a HID keyboard to Linux; its ``/dev/input/event*`` node gives its presses
whatever window has focus, on a workstation without a display, and reading it needs nothing beyond
the kernel's ``struct input_event``. The device is grabbed (``EVIOCGRAB``) where it can be, so a
pedal's key never also types into the operator's terminal; the user needs read access to it (the
``input`` group, or a udev rule).
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct
from typing import Sequence

from ..rewards.labels import Label

EVENT = struct.Struct('llHHi')   # struct input_event (64-bit Linux): timeval (s, us), type, code, value
EV_KEY, KEY_DOWN = 0x01, 1
EVIOCGRAB = 0x40044590           # _IOW('E', 0x90, int)
LABEL_ORDER = (Label.SUCCESS, Label.FAILURE, Label.RERECORD)


class KeyLabels:
    """Key presses -> episode labels. ``keys``: the evdev key codes of success, failure and
    re-record, in that order (``linux/input-event-codes.h``). A key's press is one label (its
    auto-repeat and release are not); every other key and event is ignored. Bytes may arrive split
    anywhere: a partial record waits for the rest."""

    def __init__(self, keys: Sequence[int]):
        keys = [int(k) for k in keys]
        if len(keys) != 3 or len(set(keys)) != 3 or min(keys) < 0:
            raise ValueError(f'label_keys must be 3 distinct key codes (success, failure, re-record), got {keys}')
        self.labels = dict(zip(keys, LABEL_ORDER))
        self._pending = b''
        self.ignored = 0

    def feed(self, data: bytes) -> list[tuple[Label, int]]:
        """The labels (and their key codes) that ``data`` completes, in order."""
        buf = self._pending + data
        whole = len(buf) - len(buf) % EVENT.size
        self._pending = buf[whole:]
        out = []
        for _, _, kind, code, value in EVENT.iter_unpack(buf[:whole]):
            if kind != EV_KEY or value != KEY_DOWN:
                continue
            if code in self.labels:
                out.append((self.labels[code], code))
            else:
                self.ignored += 1
        return out


class KeyDevice:
    """A Linux input device read without blocking (any file or FIFO that holds the same records
    reads the same: the stand-in the tests write). A missing or unreadable device is refused at
    start, naming ``param`` and the path; one that goes away later (unplugged) raises IOError from
    ``read``, for the caller to count."""

    def __init__(self, path: str, param: str = 'label_device'):
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise ValueError(f'{param} {path!r} cannot be opened: {e.strerror} (a foot switch or keyboard: '
                             f'/dev/input/by-id/*-event-kbd, readable by this user)') from e
        self.path = path
        try:
            fcntl.ioctl(self.fd, EVIOCGRAB, 1)
            self.grabbed = True
        except OSError:    # not an evdev node (a FIFO), or another reader holds it
            self.grabbed = False

    def read(self) -> bytes:
        chunks = []
        while True:
            try:
                data = os.read(self.fd, EVENT.size * 64)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise IOError(f'{self.path}: {e.strerror}') from e
            if not data:
                break
            chunks.append(data)
        return b''.join(chunks)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


__all__ = ['EVENT', 'EV_KEY', 'KEY_DOWN', 'KeyDevice', 'KeyLabels']
