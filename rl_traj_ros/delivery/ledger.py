"""The collector's record of which joined rows are stored downstream (what it may ack upstream)."""
from __future__ import annotations

from typing import Iterable

from ..data.identity import Cell, TrajectoryId
from ..data.schema import TrajectoryKey

class RowLedger:
    """Which env rows of each joined chunk are not yet durably stored downstream.

    ``joined(key, rows)`` opens a chunk; ``emitted(tid, cells)`` records which cells an output
    carries; ``settle(tid)`` (the writer acknowledged it) and ``discard(cells)`` (dropped on
    purpose) close cells. Both return the keys whose every row is now closed: what may be
    acknowledged upstream.
    """

    def __init__(self) -> None:
        self._open: dict[TrajectoryKey, set[int]] = {}
        self._outputs: dict[TrajectoryId, list[Cell]] = {}

    def joined(self, key: TrajectoryKey, rows: int) -> None:
        self._open.setdefault(key, set(range(rows)))

    def emitted(self, tid: TrajectoryId, cells: list[Cell]) -> None:
        self._outputs[tid] = cells

    def settle(self, tid: TrajectoryId) -> list[TrajectoryKey]:
        return self.discard(self._outputs.pop(tid, ()))

    def discard(self, cells: Iterable[Cell]) -> list[TrajectoryKey]:
        done = []
        for key, row in cells:
            rows = self._open.get(key)
            if rows is None:
                continue
            rows.discard(row)
            if not rows:
                del self._open[key]
                done.append(key)
        return done

    def is_open(self, key: TrajectoryKey) -> bool:
        return key in self._open

    def unsettled(self) -> int:
        """Chunks with at least one row not yet stored."""
        return len(self._open)

    def unsettled_keys(self) -> list[TrajectoryKey]:
        return list(self._open)

    def awaiting(self) -> int:
        """Emitted outputs not yet acknowledged."""
        return len(self._outputs)


__all__ = ['RowLedger']
