"""A node's data-path endpoints for its run: what it publishes carries the run id (commands also
their HMAC), what it subscribes to reaches its callback only when ``delivery.run_guard`` admits it.

A command's signature covers every field of the message but ``auth`` (the keys it answers, the
actions, the stamp, the run id), walked in the .msg order (``canonical``), so no per-type encoding
can drift from the .msg files. Not the CDR bytes: rclpy's serializer leaves its alignment padding
uninitialized, so the same message serializes differently in two processes. The commands are the
message types with an ``auth`` field (ActionChunk, Intervention, PolicyWeights).
"""
from __future__ import annotations

import array
import struct
from typing import Any, Callable, Iterator

from ..delivery.run_guard import RunGuard, read_secret


def canonical(msg) -> Iterator[bytes]:
    """The bytes a command's signature covers: each field but ``auth``, in order, length-prefixed."""
    for name in msg.get_fields_and_field_types():
        if name != 'auth':
            yield from _value(getattr(msg, name))


def _value(v) -> Iterator[bytes]:
    if hasattr(v, 'get_fields_and_field_types'):
        yield from canonical(v)
    elif isinstance(v, (bytes, bytearray, memoryview, array.array)) or hasattr(v, 'tobytes'):
        raw = v.tobytes() if hasattr(v, 'tobytes') else bytes(v)   # numbers as their raw little-endian bytes
        yield struct.pack('<Q', len(raw))
        yield raw
    elif isinstance(v, str):
        raw = v.encode()
        yield struct.pack('<Q', len(raw))
        yield raw
    elif isinstance(v, (list, tuple)):
        yield struct.pack('<Q', len(v))
        for x in v:
            yield from _value(x)
    else:  # bool, int, float
        yield repr(v).encode() + b';'


def is_command(msg_type) -> bool:
    return 'auth' in msg_type.get_fields_and_field_types()


class RunPublisher:
    """A publisher that stamps ``run_id`` (and signs a command) on ``publish``; the rest is the
    rclpy publisher's (topic_name, get_subscription_count, wait_for_all_acked, ...)."""

    def __init__(self, pub, guard: RunGuard, command: bool):
        self._pub, self._guard, self._command = pub, guard, command

    def publish(self, msg) -> None:
        msg.run_id = self._guard.run_id
        if self._command:
            msg.auth = self._guard.sign(canonical(msg))
        self._pub.publish(msg)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pub, name)


class RunLink:
    """Built once per node from its parameters (``run_id``, ``secret_file``, ``require_signed``)."""

    def __init__(self, node, p):
        secret = read_secret(p['secret_file']) if p['secret_file'] else None
        self.node = node
        self.guard = RunGuard(p['run_id'], secret, bool(p['require_signed']) if 'require_signed' in p else False,
                              node.get_logger().warning)

    @property
    def run_id(self) -> str:
        return self.guard.run_id

    def publisher(self, msg_type, topic: str, qos) -> RunPublisher:
        return RunPublisher(self.node.create_publisher(msg_type, topic, qos), self.guard, is_command(msg_type))

    def subscription(self, msg_type, topic: str, callback: Callable[[Any], None], qos):
        guard, command = self.guard, is_command(msg_type)

        def admitted(m) -> None:
            if guard.admit(topic, m.run_id, bytes(m.auth) if command else b'',
                           (lambda: canonical(m)) if command else None):
                callback(m)
        return self.node.create_subscription(msg_type, topic, admitted, qos)
