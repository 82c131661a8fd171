"""End-to-end delivery: keep what was published until the writer says its keys are stored.

DDS reliability ends at the reader's process: a collector or writer that crashes loses what
it had received, and a link cut longer than the participant lease unmatches readers and
drops what was in flight (measured: 523/900 lost at 25 s, research notes §5). So producers
keep every published message until a ``KeyAck`` from the replay-buffer writer names all of
its keys, and resend them when a consumer (re)appears or an ack is overdue. Consumers
deduplicate by TrajectoryKey: the writer against its persisted index, the collector by its
joiner. Result: at-least-once on the wire, exactly once in the buffer.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterable

from ..core.schema import TrajectoryKey


class Outbox:
    """Published-but-unacknowledged messages, each tagged with the keys it carries."""

    def __init__(self, publish: Callable[[Any], None], resend_after_s: float = 30.0):
        self.publish = publish
        self.resend_after_s = resend_after_s
        self._items: OrderedDict[Hashable, tuple[frozenset, Any, float]] = OrderedDict()
        self._matched = 0
        self.resent = 0

    def send(self, ident: Hashable, keys: Iterable[TrajectoryKey], msg: Any) -> None:
        self._items[ident] = (frozenset(keys), msg, time.monotonic())
        self.publish(msg)

    def ack(self, keys: Iterable[TrajectoryKey]) -> int:
        acked = set(keys)
        done = [i for i, (ks, _, _) in self._items.items() if ks <= acked]
        for i in done:
            del self._items[i]
        return len(done)

    def tick(self, matched: int) -> int:
        """Resend everything to a newly matched consumer, or what waited too long for its ack."""
        now = time.monotonic()
        fresh_consumer = matched > self._matched
        self._matched = matched
        if matched == 0:
            return 0
        n = 0
        for ident, (ks, msg, sent) in list(self._items.items()):
            if fresh_consumer or now - sent > self.resend_after_s:
                self.publish(msg)
                self._items[ident] = (ks, msg, now)
                n += 1
        self.resent += n
        return n

    def __len__(self) -> int:
        return len(self._items)
