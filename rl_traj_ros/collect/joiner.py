"""Pairing of the two halves of every action chunk, whatever their arrival order (spec §3)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterable, Optional, TypeVar, Union

from ..data.schema import EnvPart, MalformedPartError, PolicyPart, TrajectoryKey, TrajectorySource
from ..delivery.outbox import RecentKeys

T = TypeVar('T')
Part = Union[PolicyPart, EnvPart]


class DuplicateChunkError(MalformedPartError):
    """A part arrived for a key that was already completed (exactly-once violation)."""


@dataclass
class JoinedChunk:
    key: TrajectoryKey
    source: TrajectorySource
    policy: PolicyPart
    env: EnvPart


@dataclass
class _Half:
    fragments: dict[int, tuple[TrajectorySource, Part]] = field(default_factory=dict)

    def rows(self) -> int:
        return sum(s.size for s, _ in self.fragments.values())

    def whole(self, batch: int) -> bool:
        return self.rows() == batch

    def merged(self, merge: Callable) -> Part:
        return merge([p for _, (_, p) in sorted(self.fragments.items())])


@dataclass
class _Slot:
    policy: _Half = field(default_factory=_Half)
    env: _Half = field(default_factory=_Half)
    first_seen: float = field(default_factory=time.monotonic)


class ChunkJoiner(Generic[T]):
    """Holds fragments per key and half until both halves cover the source batch.

    ``batch_size`` gives a source's env count: routed fragments carry only (size, offset),
    so completeness needs to know the whole. A fragment that would exceed the batch or
    overlap another is rejected before it is stored, so a bad part never corrupts a key.
    A fragment at the same offset and size as a stored one replaces it (re-delivery).
    """

    def __init__(self, batch_size: Union[int, Callable[[tuple[int, int]], int]], retired_window: int = 4096):
        self._batch_size = batch_size if callable(batch_size) else (lambda _sid, b=int(batch_size): b)
        self._slots: dict[TrajectoryKey, _Slot] = {}
        # completed keys whose rows are not all stored yet: a resend of these is a duplicate
        self._completed: set[TrajectoryKey] = set()
        # completed and acknowledged upstream: remembered for a grace window only, to absorb
        # resends already in flight when the ack went out (bounded memory over long runs)
        self._retired = RecentKeys(retired_window)

    # -- intake -----------------------------------------------------------------------------
    def add(self, part: Part) -> list[TrajectoryKey]:
        """Store a (possibly multi-source) part; return keys whose halves are now both whole."""
        part.validate()
        half_name = 'policy' if isinstance(part, PolicyPart) else 'env'
        pieces = part.split_sources()
        for src, _ in pieces:  # validate every fragment before storing any
            self._check_fragment(src, half_name)
        ready = []
        for src, piece in pieces:
            slot = self._slots.setdefault(src.key, _Slot())
            getattr(slot, half_name).fragments[src.offset] = (src, piece)
            if self.is_ready(src.key) and src.key not in ready:
                ready.append(src.key)
        return ready

    def _check_fragment(self, src: TrajectorySource, half_name: str) -> None:
        if self.was_completed(src.key):
            raise DuplicateChunkError(f'{half_name} part for already completed key {src.key.as_tuple()}')
        batch = self._batch_size(src.key.source_id)
        if src.end > batch:
            raise MalformedPartError(f'{half_name} fragment [{src.offset}, {src.end}) of {src.key.as_tuple()} '
                                     f'exceeds the source batch of {batch} envs (too much data)')
        slot = self._slots.get(src.key)
        if slot is None:
            return
        for s, _ in getattr(slot, half_name).fragments.values():
            if s.offset == src.offset and s.size == src.size:
                continue  # re-delivery replaces
            if s.offset < src.end and src.offset < s.end:
                raise MalformedPartError(f'{half_name} fragment [{src.offset}, {src.end}) of {src.key.as_tuple()} '
                                         f'overlaps stored fragment [{s.offset}, {s.end})')

    # -- completion ----------------------------------------------------------------------------
    def is_ready(self, key: TrajectoryKey) -> bool:
        slot = self._slots.get(key)
        if slot is None:
            return False
        batch = self._batch_size(key.source_id)
        return slot.policy.whole(batch) and slot.env.whole(batch)

    def ready_keys(self) -> list[TrajectoryKey]:
        return sorted(k for k in self._slots if self.is_ready(k))

    def peek(self, key: TrajectoryKey) -> JoinedChunk:
        """The joined chunk of a ready key, without releasing it."""
        if not self.is_ready(key):
            raise KeyError(f'key {key.as_tuple()} is not ready')
        slot = self._slots[key]
        policy = slot.policy.merged(PolicyPart.merge)
        env = slot.env.merged(EnvPart.merge)
        if policy.sources != env.sources or len(policy.sources) != 1 or policy.sources[0].offset != 0:
            raise MalformedPartError(f'fragments of {key.as_tuple()} are not contiguous from offset 0 (gap)')
        if key.chunk_id == 0 and env.initial_transition is None:
            raise MalformedPartError(f'chunk 0 of {key.as_tuple()} carries no initial_transition')
        if key.chunk_id != 0 and env.initial_transition is not None:
            raise MalformedPartError(f'chunk {key.chunk_id} of {key.as_tuple()} carries an initial_transition '
                                     '(only chunk 0 may)')
        return JoinedChunk(key, policy.sources[0], policy, env)

    def complete(self, key: TrajectoryKey, build: Callable[[JoinedChunk], T]) -> T:
        """Build the output of a ready key; release its halves only if ``build`` succeeded."""
        if self.was_completed(key):
            raise DuplicateChunkError(f'key {key.as_tuple()} was already completed')
        result = build(self.peek(key))
        del self._slots[key]
        self._completed.add(key)
        return result

    # -- bookkeeping ---------------------------------------------------------------------------
    def pending(self) -> dict[TrajectoryKey, dict[str, int]]:
        """Keys still waiting, with the rows each half has so far."""
        return {k: {'policy_rows': s.policy.rows(), 'env_rows': s.env.rows()} for k, s in self._slots.items()}

    def expire(self, max_age_s: float, now: Optional[float] = None, include_ready: bool = False) -> list[TrajectoryKey]:
        """Drop keys whose other half never came, so a lost part cannot leak memory forever
        (``include_ready``: also ready keys that never built, e.g. a malformed pair)."""
        now = time.monotonic() if now is None else now
        stale = [k for k, s in self._slots.items()
                 if now - s.first_seen > max_age_s and (include_ready or not self.is_ready(k))]
        for k in stale:
            del self._slots[k]
        return stale

    def retire(self, keys: Iterable[TrajectoryKey]) -> None:
        """These keys are acknowledged upstream (every row stored): their producer forgets them,
        so only resends already in flight can still arrive; keep them for a grace window only."""
        for k in keys:
            if k in self._completed:
                self._completed.discard(k)
                self._retired.add(k)

    def was_completed(self, key: TrajectoryKey) -> bool:
        return key in self._completed or key in self._retired

    def completed_keys_held(self) -> int:
        """Completed keys kept in memory (unacknowledged + grace window)."""
        return len(self._completed) + len(self._retired)

    def __len__(self) -> int:
        return len(self._slots)
