"""SIGINT and SIGTERM in a node process: recorded, never raised.

A terminal Ctrl-C on ``ros2 launch`` reaches every node of the process group, and launch then
sends each node a second SIGINT. Raised as KeyboardInterrupt, the second one lands wherever the
node is: inside rclpy's destruction (pybind11 aborts the process, exit -6) or in an atexit
hook. So a signal only sets a flag that the node's spin loop reads; the node then flushes and
exits 0 however many signals follow. Installed first thing, before torch and rclpy are
imported: a signal during those imports is kept (not lost, not a traceback), and a process
started in the background of a script, where SIGINT arrives ignored, still stops on it.

After the first signal both are ignored (SIG_IGN) until the process is gone: CPython resets a
Python-level handler to the default at interpreter finalization, so a second Ctrl-C landing in
the teardown 0.7 s later killed the node (exit -2); an ignored signal stays ignored. The node's
own deadlines (``delivery.stop``, ``run_node``'s teardown timer) bound its end instead.
"""
from __future__ import annotations

import signal
import time
from typing import Optional


class StopSignals:
    def __init__(self):
        self.first: Optional[int] = None  # the first signal; later ones change nothing
        self.at: Optional[float] = None   # its time.monotonic()

    def _on(self, signum, frame) -> None:
        if self.first is None:
            self.first, self.at = signum, time.monotonic()
            self.ignore_further()

    def ignore_further(self) -> None:
        """From now on SIGINT and SIGTERM are ignored (a node that is ending: its flush and teardown)."""
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)

    def install(self) -> 'StopSignals':
        if self.first is not None:  # installed again (run_node after the module's import) after a signal
            self.ignore_further()
            return self
        self._before = {s: signal.signal(s, self._on) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def uninstall(self) -> None:
        """The handlers from before ``install`` (a runner inside a longer-lived process)."""
        for s, handler in getattr(self, '_before', {}).items():
            signal.signal(s, handler)
        self._before = {}

    @property
    def requested(self) -> bool:
        return self.first is not None

    def left_s(self, deadline_s: float) -> float:
        """Seconds left until ``deadline_s`` after the first signal (0 once past it)."""
        return max(0.0, self.at + deadline_s - time.monotonic()) if self.at is not None else deadline_s

    def name(self) -> str:
        return signal.Signals(self.first).name if self.first is not None else ''


STOP = StopSignals()


def install() -> StopSignals:
    return STOP.install()
