"""Losing no step: what the writer stored of trajectories a learner never received.

A learner that was down (SIGKILLed, restarted from its checkpoint) reads from the writer's
directory the trajectories it still wants, on start and whenever the writer's atomically
replaced index changed; it never writes there. ROS-free: the learner node polls it on a timer.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..data.identity import TrajectoryId
from ..data.trajectory import Trajectory
from ..storage.files import BufferFileError
from ..storage.index import INDEX_FILE, read_stored_trajectories


class StoredCatchUp:
    def __init__(self, directory: str | Path, wants: Callable[[TrajectoryId], bool]):
        self.directory, self.wants = Path(directory), wants
        self._index_mtime: Optional[int] = None
        self.last_error: Optional[str] = None

    def poll(self) -> list[Trajectory]:
        """The wanted trajectories stored since the last poll ([] when the index did not change,
        or cannot be read yet: ``last_error`` says why, the next poll tries again)."""
        try:
            mtime = (self.directory / INDEX_FILE).stat().st_mtime_ns
        except FileNotFoundError:
            return []
        if mtime == self._index_mtime:
            return []
        try:
            missed = read_stored_trajectories(self.directory, self.wants)
        except (BufferFileError, OSError, ValueError) as e:  # e.g. the writer is mid-way through its first write
            self.last_error = f'cannot read {self.directory} yet: {e}'
            return []
        self._index_mtime, self.last_error = mtime, None
        return missed


__all__ = ['StoredCatchUp']
