"""A node's end after a stop signal, upstream first (ROS-free; ``nodes/common.run_node`` drives it).

A terminal Ctrl-C on ``ros2 launch`` signals every node of a pipeline at once, so which process
ends first decides what survives: a writer that closed before the collector's last flush lost it.
So each node keeps serving after the signal until the nodes upstream of it are done (no
publisher left on its input topics, for ``grace_s``: a last message may still be on its way)
and what it sent downstream is delivered, and only then flushes and exits. The env ends first
(it sends its last chunk's EnvPart), the policy node once no env publishes requests, the
collector once no policy node publishes parts and the writer acknowledged every trajectory, the
writer once no collector publishes trajectories. Graph presence, less the nodes that said they
are done (an env's terminal request names it: the env may still be finalizing its dataset): a
node that crashed or was never there ends the wait as well as one that said goodbye.

Each node has its own deadline after the first signal (``stop_deadline_s``: env < policy <
collector < writer, all within launch's 5 s before it escalates to SIGTERM): a node whose
upstream never leaves (another run's publisher on the topic) or whose downstream never
acknowledges stops waiting then and says what it could not deliver.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

GRACE_S = 0.25  # upstream gone this long: its last message, published before it left, has arrived


class StopDrain:
    def __init__(self, upstream: Callable[[], int], delivered: Callable[[], bool], deadline_s: float,
                 grace_s: float = GRACE_S, clock: Callable[[], float] = time.monotonic):
        """``upstream()``: publishers left on the node's input topics; ``delivered()``: nothing it
        sent waits for an acknowledgement any more (or its reader is gone)."""
        self.upstream, self.delivered, self.deadline_s, self.grace_s = upstream, delivered, deadline_s, grace_s
        self.clock = clock
        self.t0: Optional[float] = None
        self._gone_at: Optional[float] = None

    def start(self, t0: Optional[float] = None) -> None:
        """The deadline counts from ``t0`` (the first signal's ``clock()`` time; default now)."""
        self.t0 = self.clock() if t0 is None else t0

    def poll(self) -> Optional[str]:
        """None while the node should keep serving; once it may exit, why."""
        if self.t0 is None:
            self.start()
        now = self.clock()
        left = self.upstream()
        if left > 0:
            self._gone_at = None
        elif self._gone_at is None:
            self._gone_at = now
        upstream_done = self._gone_at is not None and now - self._gone_at >= self.grace_s
        if upstream_done and self.delivered():
            return f'upstream done and everything delivered after {now - self.t0:.2f} s'
        if now - self.t0 >= self.deadline_s:
            what = f'{left} upstream publishers still there' if left else 'not everything sent was acknowledged'
            return f'stop deadline ({self.deadline_s:g} s) reached: {what}'
        return None


__all__ = ['GRACE_S', 'StopDrain']
