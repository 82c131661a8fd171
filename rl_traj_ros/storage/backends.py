"""Where a replay buffer keeps its trajectories: the ``Storage`` protocol and its memory backend.

Composed like torchrl's storages: the buffer owns the index, the cache of the newest
trajectories and the writer thread; a storage owns the trajectories' data by ``seq``
(``put``/``get``/``drop``). ``MemoryStorage`` keeps them in this process (a buffer without
``auto_save``); ``files.TrajectoryFiles`` writes one durable file each and keeps an LRU of
memory-mapped files open. A buffer writes to a ``durable`` storage on its writer thread and
acknowledges a trajectory once ``put`` returned; to a memory storage it puts at once.
"""
from __future__ import annotations

from typing import Protocol

import torch


class Storage(Protocol):
    durable: bool  # put returns once the data survive a crash (the buffer acknowledges then)

    def put(self, seq: int, data: dict[str, torch.Tensor]) -> None:
        """Keep ``data`` (flattened rows, ``storage.layout``) as ``seq``."""

    def get(self, seq: int) -> dict[str, torch.Tensor]:
        """``seq``'s data; a missing one raises an error naming it."""

    def drop(self, seq: int) -> None:
        """The buffer no longer samples ``seq``: free what this process holds of it."""

    def clear(self) -> None:
        """Free what this process holds (a durable storage keeps its files)."""


class MemoryStorage:
    """Trajectories in this process's memory; the buffer hands over tensors it owns."""

    durable = False

    def __init__(self):
        self._data: dict[int, dict[str, torch.Tensor]] = {}

    def put(self, seq: int, data: dict[str, torch.Tensor]) -> None:
        self._data[seq] = data

    def get(self, seq: int) -> dict[str, torch.Tensor]:
        try:
            return self._data[seq]
        except KeyError:
            raise KeyError(f'trajectory {seq} is not in this memory storage') from None

    def __contains__(self, seq: int) -> bool:
        return seq in self._data

    def drop(self, seq: int) -> None:
        self._data.pop(seq, None)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


__all__ = ['Storage', 'MemoryStorage']
