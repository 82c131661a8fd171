"""Producers' side of end-to-end delivery: what was sent and is not yet acknowledged."""
from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Callable, Generic, Hashable, Iterable, Optional, TypeVar

from ..params.defaults import POLICY

M = TypeVar('M')

class Outbox(Generic[M]):
    """Published-but-unacknowledged messages, each waiting for a set of acknowledgement tokens.

    A message is released once every token it waits for was acknowledged, in one ack or in
    several (a merged PolicyPart waits for each of its chunk keys; a Trajectory for its id).
    """

    def __init__(self, publish: Callable[[M], None], resend_after_s: float = POLICY.resend_after_s,
                 clock: Callable[[], float] = time.monotonic):
        self.publish, self.resend_after_s, self.clock = publish, resend_after_s, clock
        self._items: OrderedDict[Hashable, list] = OrderedDict()   # ident -> [waiting tokens, msg, sent]
        self._by_token: dict[Hashable, set[Hashable]] = {}
        self._matched = 0
        self.resent = 0

    def send(self, ident: Hashable, tokens: Iterable[Hashable], msg: M, matched: Optional[int] = None) -> None:
        """Publish and keep ``msg`` until ``tokens`` are acknowledged. ``matched`` (the
        publisher's current consumer count) brings the outbox up to date first: a consumer
        that appeared since the last ``tick`` gets the older items now, and this one is not
        resent to it later (it is published while that consumer is already matched)."""
        tokens = set(tokens)
        if not tokens:
            raise ValueError(f'outbox item {ident!r} waits for no acknowledgement')
        if matched is not None:
            self.tick(matched)
        self._drop(ident)
        self._items[ident] = [tokens, msg, self.clock()]
        for t in tokens:
            self._by_token.setdefault(t, set()).add(ident)
        self.publish(msg)

    def ack(self, tokens: Iterable[Hashable]) -> list[Hashable]:
        """Mark tokens acknowledged; return the idents of messages now fully acknowledged."""
        released = []
        for t in tokens:
            for ident in self._by_token.pop(t, ()):
                item = self._items.get(ident)
                if item is None:
                    continue
                item[0].discard(t)
                if not item[0]:
                    del self._items[ident]
                    released.append(ident)
        return released

    def _drop(self, ident: Hashable) -> None:
        item = self._items.pop(ident, None)
        if item is not None:
            for t in item[0]:
                idents = self._by_token.get(t)
                if idents is not None:
                    idents.discard(ident)
                    if not idents:
                        del self._by_token[t]

    def tick(self, matched: int) -> int:
        """Resend everything to a newly matched consumer, or what waited too long for its ack."""
        now = self.clock()
        fresh_consumer = matched > self._matched
        self._matched = matched
        if matched == 0:
            return 0
        n = 0
        for item in self._items.values():
            if fresh_consumer or now - item[2] > self.resend_after_s:
                self.publish(item[1])
                item[2] = now
                n += 1
        self.resent += n
        return n

    def __len__(self) -> int:
        return len(self._items)

    def pending(self) -> list[Hashable]:
        """What is still waiting for acknowledgements, oldest first."""
        return list(self._items)

    def __contains__(self, ident: Hashable) -> bool:
        return ident in self._items

class RecentKeys:
    """A bounded memory of keys: the newest ``capacity`` added, oldest forgotten first."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._set: set = set()
        self._order: deque = deque()

    def add(self, key: Hashable) -> None:
        if key in self._set or self.capacity <= 0:
            return
        self._set.add(key)
        self._order.append(key)
        while len(self._order) > self.capacity:
            self._set.discard(self._order.popleft())

    def discard(self, key: Hashable) -> None:
        self._set.discard(key)  # its slot in _order ages out harmlessly

    def __contains__(self, key: Hashable) -> bool:
        return key in self._set

    def __len__(self) -> int:
        return len(self._set)


__all__ = ['Outbox', 'RecentKeys']
