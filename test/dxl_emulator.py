"""A Dynamixel Protocol 2.0 servo chain on a pty: GELLO without the hardware.

Written from the protocol definition: packets ``FF FF FD 00 | ID | LEN(2) | INST | PARAMS |
CRC(2)``, byte stuffing (``FF FF FD`` in the payload is followed by an extra ``FD``), CRC-16
with polynomial 0x8005. Answers PING (also broadcast), READ, WRITE, SYNC_READ, SYNC_WRITE
and REBOOT from a 256-byte control table per servo (model 1200, XL330-M288). Joint angles
are injected with ``set_positions_rad`` (4096 ticks per turn, 2048 = 0 rad).

The pty slave is closed after set-up, so no process but the client holds the port (GELLO's
driver kills other holders of its port).
"""
from __future__ import annotations

import math
import os
import struct
import threading
import time
import tty
from pathlib import Path
from typing import Optional

HEADER = b'\xff\xff\xfd\x00'
PING, READ, WRITE, REBOOT, STATUS, SYNC_READ, SYNC_WRITE = 0x01, 0x02, 0x03, 0x08, 0x55, 0x82, 0x83
BROADCAST = 0xFE
ADDR_MODEL, ADDR_FIRMWARE, ADDR_TORQUE, ADDR_GOAL, ADDR_VELOCITY, ADDR_POSITION = 0, 6, 64, 116, 128, 132
TICKS_PER_RAD = 2048 / math.pi


def crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def stuff(payload: bytes) -> bytes:
    return payload.replace(b'\xff\xff\xfd', b'\xff\xff\xfd\xfd')


def unstuff(payload: bytes) -> bytes:
    return payload.replace(b'\xff\xff\xfd\xfd', b'\xff\xff\xfd')


def packet(servo_id: int, inst: int, params: bytes) -> bytes:
    body = stuff(bytes([inst]) + params)
    head = HEADER + bytes([servo_id]) + struct.pack('<H', len(body) + 2)
    raw = head + body
    return raw + struct.pack('<H', crc16(raw))


class DynamixelEmulator:
    def __init__(self, ids, link: Optional[str] = None, model: int = 1200, firmware: int = 52):
        self.tables = {i: bytearray(256) for i in ids}
        for t in self.tables.values():
            t[ADDR_MODEL:ADDR_MODEL + 2] = struct.pack('<H', model)
            t[ADDR_FIRMWARE] = firmware
            t[ADDR_POSITION:ADDR_POSITION + 4] = struct.pack('<i', 2048)
        self.master, slave = os.openpty()
        tty.setraw(slave)
        self.port = os.ttyname(slave)
        os.close(slave)  # only the client may hold the port
        if link:
            Path(link).unlink(missing_ok=True)
            os.symlink(self.port, link)
            self.port = link
        self._lock = threading.Lock()
        self._stop = False
        self.packets = 0
        self._thread = threading.Thread(target=self._serve, daemon=True, name='dxl-emulator')
        self._thread.start()

    # -- test-side API --------------------------------------------------------------------------
    def set_positions_rad(self, positions: dict) -> None:
        with self._lock:
            for i, rad in positions.items():
                self.tables[i][ADDR_POSITION:ADDR_POSITION + 4] = struct.pack('<i', int(round(2048 + rad * TICKS_PER_RAD)))

    def position_rad(self, i: int) -> float:
        with self._lock:
            return (struct.unpack('<i', bytes(self.tables[i][ADDR_POSITION:ADDR_POSITION + 4]))[0] - 2048) / TICKS_PER_RAD

    def close(self) -> None:
        self._stop = True
        try:
            os.close(self.master)
        except OSError:
            pass

    # -- serving --------------------------------------------------------------------------------
    def _serve(self) -> None:
        buf = b''
        while not self._stop:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO while no client has the slave open
                time.sleep(0.01)
                continue
            buf += chunk
            while True:
                start = buf.find(HEADER)
                if start < 0 or len(buf) < start + 7:
                    buf = buf[start:] if start >= 0 else buf[-3:]
                    break
                length = struct.unpack('<H', buf[start + 5:start + 7])[0]
                end = start + 7 + length
                if len(buf) < end:
                    buf = buf[start:]
                    break
                raw, buf = buf[start:end], buf[end:]
                if struct.unpack('<H', raw[-2:])[0] != crc16(raw[:-2]):
                    continue  # corrupt packet: a real servo stays silent
                self.packets += 1
                reply = self._handle(raw[4], raw[7], unstuff(raw[8:-2]))
                if reply:
                    os.write(self.master, reply)

    def _status(self, i: int, params: bytes = b'', error: int = 0) -> bytes:
        return packet(i, STATUS, bytes([error]) + params)

    def _handle(self, target: int, inst: int, params: bytes) -> bytes:
        with self._lock:
            if inst == PING:
                ids = sorted(self.tables) if target == BROADCAST else ([target] if target in self.tables else [])
                return b''.join(self._status(i, bytes(self.tables[i][0:2]) + bytes([self.tables[i][6]])) for i in ids)
            if inst == SYNC_READ:
                addr, n = struct.unpack('<HH', params[:4])
                return b''.join(self._status(i, bytes(self.tables[i][addr:addr + n])) for i in params[4:] if i in self.tables)
            if inst == SYNC_WRITE:
                addr, n = struct.unpack('<HH', params[:4])
                data = params[4:]
                for k in range(0, len(data), n + 1):
                    self._write(data[k], addr, data[k + 1:k + 1 + n])
                return b''
            if target not in self.tables:
                return b''
            if inst == READ:
                addr, n = struct.unpack('<HH', params[:4])
                return self._status(target, bytes(self.tables[target][addr:addr + n]))
            if inst == WRITE:
                self._write(target, struct.unpack('<H', params[:2])[0], params[2:])
                return self._status(target)
            if inst == REBOOT:
                return self._status(target)
            return self._status(target, error=0x02)  # instruction error

    def _write(self, i: int, addr: int, data: bytes) -> None:
        if i not in self.tables:
            return
        t = self.tables[i]
        t[addr:addr + len(data)] = data
        if addr == ADDR_GOAL and t[ADDR_TORQUE]:  # torque on: the servo reaches its goal
            t[ADDR_POSITION:ADDR_POSITION + 4] = t[ADDR_GOAL:ADDR_GOAL + 4]
