"""SIGINT and SIGTERM in a node process: recorded, never raised.

A terminal Ctrl-C on ``ros2 launch`` reaches every node of the process group, and launch then
sends each node a second SIGINT. Raised as KeyboardInterrupt, the second one lands wherever the
node is: inside rclpy's destruction (pybind11 aborts the process, exit -6) or in an atexit
hook. So a signal only sets a flag that the node's spin loop reads; the node then flushes and
exits 0 however many signals follow. Installed first thing, before torch and rclpy are
imported: a signal during those imports is kept (not lost, not a traceback), and a process
started in the background of a script, where SIGINT arrives ignored, still stops on it.
"""
from __future__ import annotations

import signal
from typing import Optional


class StopSignals:
    def __init__(self):
        self.first: Optional[int] = None  # the first signal; later ones change nothing

    def _on(self, signum, frame) -> None:
        if self.first is None:
            self.first = signum

    def install(self) -> 'StopSignals':
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

    def name(self) -> str:
        return signal.Signals(self.first).name if self.first is not None else ''


STOP = StopSignals()


def install() -> StopSignals:
    return STOP.install()
