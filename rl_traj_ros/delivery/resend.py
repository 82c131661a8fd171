"""The env's side of a request in flight: send it again while no reply came, give up at a deadline.

A request lost in a link cut (or sent before the policy's reader matched) is sent again every
``resend_s``; the policy dedupes by key (``gate.PolicyGate``: the same chunk again). Past
``timeout_s`` without a reply the rollout stops with an error naming the chunk.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

RESEND, TIMEOUT = 'resend', 'timeout'


class ReplyWait:
    def __init__(self, resend_s: float, timeout_s: float, clock: Callable[[], float] = time.monotonic):
        self.resend_s, self.timeout_s, self.clock = resend_s, timeout_s, clock
        self._sent = self._resend_at = self._deadline = 0.0

    def sent(self) -> None:
        """The request just went out (the first time)."""
        self._sent = self.clock()
        self._resend_at, self._deadline = self._sent + self.resend_s, self._sent + self.timeout_s

    def poll(self) -> Optional[str]:
        """``TIMEOUT`` past the deadline, ``RESEND`` when a resend is due (and schedules the
        next one), else None."""
        now = self.clock()
        if now > self._deadline:
            return TIMEOUT
        if now > self._resend_at:
            self._resend_at = now + self.resend_s
            return RESEND
        return None

    def waited_s(self) -> float:
        return self.clock() - self._sent


__all__ = ['ReplyWait', 'RESEND', 'TIMEOUT']
