"""The pipe between the policy node and its LeRobot inference process: frames of a JSON header
and named numpy arrays.

Why a second process: LeRobot 0.6.1 needs Python >= 3.12 and rclpy here is a CPython 3.11
build, so the node cannot import LeRobot; it starts ``lerobot_server.py`` under the LeRobot
interpreter and talks to it over stdin/stdout. This module is imported by both sides, so it
uses only the standard library and numpy. Arrays travel as ``.npy`` records loaded with
``allow_pickle=False``: a frame carries data, never code.

A frame: 4-byte big-endian header length, the UTF-8 JSON header, 4-byte array count, then per
array a 2-byte name length, the name, an 8-byte length and the ``.npy`` bytes.
"""
from __future__ import annotations

import io
import json
import struct
from typing import BinaryIO, Mapping

import numpy as np


class WireError(RuntimeError):
    """The other side closed the pipe or sent something that is not a frame."""


def write_frame(out: BinaryIO, header: Mapping, arrays: Mapping[str, np.ndarray] | None = None) -> None:
    head = json.dumps(header).encode()
    parts = [struct.pack('>I', len(head)), head, struct.pack('>I', len(arrays or {}))]
    for name, value in (arrays or {}).items():
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(value), allow_pickle=False)
        key = name.encode()
        parts += [struct.pack('>H', len(key)), key, struct.pack('>Q', buf.tell()), buf.getvalue()]
    out.write(b''.join(parts))
    out.flush()


def _read_exact(src: BinaryIO, n: int) -> bytes:
    data = src.read(n)
    if data is None or len(data) != n:
        raise WireError(f'pipe closed after {0 if not data else len(data)} of {n} bytes')
    return data


def read_frame(src: BinaryIO) -> tuple[dict, dict[str, np.ndarray]]:
    (n,) = struct.unpack('>I', _read_exact(src, 4))
    try:
        header = json.loads(_read_exact(src, n))
    except ValueError as e:
        raise WireError(f'header is not JSON: {e}') from None
    (count,) = struct.unpack('>I', _read_exact(src, 4))
    arrays = {}
    for _ in range(count):
        (k,) = struct.unpack('>H', _read_exact(src, 2))
        name = _read_exact(src, k).decode()
        (size,) = struct.unpack('>Q', _read_exact(src, 8))
        arrays[name] = np.load(io.BytesIO(_read_exact(src, size)), allow_pickle=False)
    return header, arrays


__all__ = ['WireError', 'write_frame', 'read_frame']
