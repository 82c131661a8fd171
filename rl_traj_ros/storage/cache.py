"""FIFO cache of the newest flattened trajectories, one arena per field."""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Optional

import torch

# -- parts ---------------------------------------------------------------------------------------
class TrajectoryCache:
    """FIFO cache of the newest flattened trajectories, stored in one arena per field.

    Slot ``i`` of the arena holds one trajectory's rows at ``[i*cap, i*cap + n)``, so rows of
    any number of cached trajectories are gathered with ONE ``index_select`` per field
    instead of one per trajectory and field (per-op overhead dominates small batches).
    Arena pages are touched only as slots fill, so an unused capacity costs no memory.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._slots: OrderedDict[int, tuple[int, int]] = OrderedDict()  # tid -> (slot, rows)
        self._free: list[int] = list(range(capacity))[::-1]
        self._arena: dict[str, torch.Tensor] = {}
        self._cap = 0  # rows per slot

    def _schema_matches(self, data: dict) -> bool:
        return (set(data) == set(self._arena) and
                all(v.dtype == self._arena[k].dtype and v.shape[1:] == self._arena[k].shape[1:] for k, v in data.items()))

    def put(self, tid: int, data: dict,
            on_evict: Optional[Callable[[int, dict], None]] = None) -> Optional[dict[str, torch.Tensor]]:
        """Copy ``data`` into a slot; returns the slot's views (None without capacity).

        ``on_evict(tid, views)`` runs before an evicted slot is overwritten, so an owner still
        holding those views (a trajectory queued for the disk) can take a copy first."""
        if self.capacity <= 0:
            return None
        rows = next(iter(data.values())).shape[0]
        if not self._arena or not self._schema_matches(data):
            self.clear()  # new field layout: start a fresh arena
            self._arena = {k: torch.empty((self.capacity * rows, *v.shape[1:]), dtype=v.dtype) for k, v in data.items()}
            self._cap = rows
        elif rows > self._cap:
            self._grow(rows)
        if not self._free:
            old_tid = next(iter(self._slots))  # evict the oldest
            if on_evict is not None:
                on_evict(old_tid, self.get(old_tid))
            _, (slot, _) = self._slots.popitem(last=False)
            self._free.append(slot)
        slot = self._free.pop()
        base = slot * self._cap
        for k, v in data.items():
            self._arena[k][base:base + rows].copy_(v)
        self._slots[tid] = (slot, rows)
        return self.get(tid)

    def _grow(self, rows: int) -> None:
        old, old_cap = self._arena, self._cap
        self._arena = {k: torch.empty((self.capacity * rows, *v.shape[1:]), dtype=v.dtype) for k, v in old.items()}
        for slot, n in self._slots.values():
            for k in old:
                self._arena[k][slot * rows:slot * rows + n].copy_(old[k][slot * old_cap:slot * old_cap + n])
        self._cap = rows

    def arena_rows(self, tid: int) -> Optional[int]:
        """First arena row of a cached trajectory, or None."""
        hit = self._slots.get(tid)
        return None if hit is None else hit[0] * self._cap

    def get(self, tid: int) -> Optional[dict]:
        hit = self._slots.get(tid)
        if hit is None:
            return None
        base = hit[0] * self._cap
        return {k: v[base:base + hit[1]] for k, v in self._arena.items()}

    @property
    def arena(self) -> dict[str, torch.Tensor]:
        return self._arena

    def ids(self) -> list[int]:
        return list(self._slots)

    def clear(self) -> None:
        self._slots.clear()
        self._free = list(range(self.capacity))[::-1]
        self._arena = {}
        self._cap = 0


__all__ = ['TrajectoryCache']
