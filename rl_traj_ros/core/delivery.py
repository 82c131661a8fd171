"""End-to-end delivery without ROS: identities, outbox, row ledger and the exactly-once sink.

DDS reliability ends at the reader's process: a collector or writer that crashes loses what
it had received, and a link cut longer than the participant lease unmatches readers and drops
what was in flight. So the data path acknowledges end to end, in two hops:

    policy node --parts--> collector --Trajectory--> writer
                <-KeyAck--          <-TrajectoryAck-

- Every ``Trajectory`` the collector emits carries a ``TrajectoryId`` that names exactly the
  rows it holds (run, step, epoch, source, actor, micro-batch, shard, episode, env rows).
  The writer (``ExactlyOnceSink``) stores each identity once and acknowledges identities, only
  after the file and index are durable (or at once for a re-delivery it already stored).
- The collector keeps each emitted trajectory in an ``Outbox`` until its identity is
  acknowledged, and a ``RowLedger`` tracks, per chunk key, which env rows are not yet stored.
  A chunk key is acknowledged upstream (``KeyAck``) only when every row of it is in some stored
  trajectory (or was dropped on purpose, ``only_success``), so a shard, a micro-batch or one
  env's episode never releases the rows of its siblings.
- Producers resend what is unacknowledged when a consumer (re)appears or an ack is overdue;
  consumers deduplicate (the joiner by key, the writer by identity and by row).

Result: at-least-once on the wire, exactly once in the buffer, in every collector mode.
Memory stays bounded: the joiner forgets acknowledged keys after a grace window
(``RecentKeys``), the sink keeps a window of recent identities in memory (the index on disk
keeps all of them).
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, Iterable, Optional, TypeVar

from .schema import MalformedPartError, TrajectoryKey

Row = tuple[int, int, int]          # (env_rank, stage_id, env index in that source's batch)
Cell = tuple[TrajectoryKey, int]    # one env row of one chunk
M = TypeVar('M')


def new_run_id(prefix: str = '') -> str:
    """A run name unique across hosts and restarts of the launcher: time, host, pid, random."""
    import os
    import socket
    import uuid
    stamp = time.strftime('%Y%m%d-%H%M%S')
    return f"{prefix}{stamp}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class TrajectoryId:
    """What one emitted trajectory is, precisely enough that equal ids mean equal rows.

    ``epoch_id`` is -1 when the trajectory spans every epoch of the step (rollout), and
    ``env_rank``/``stage_id`` -1 when it mixes sources (pipeline). For lerobot episodes
    ``step_id``/``epoch_id`` are those of the chunk that closed the episode and
    ``episode_id`` is the source-wide index of its first chunk
    (``(step*E + epoch)*L + chunk``): derived from the data, not from a counter, so a
    collector restarted mid-run rebuilds the same identity. ``rows`` lists the env rows in
    the trajectory's env order. ``run_id`` keeps runs apart: a new run into an existing
    buffer directory appends even though its step ids repeat.
    """

    run_id: str
    mode: str
    step_id: int
    epoch_id: int = -1
    env_rank: int = -1
    stage_id: int = -1
    actor_rank: int = 0
    micro_batch: int = 0
    shard: int = 0
    episode_id: int = -1
    rows: tuple[Row, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.mode:
            raise MalformedPartError(f'TrajectoryId needs a run_id string and a mode, got {self.run_id!r}, '
                                     f'{self.mode!r}')
        object.__setattr__(self, 'rows', tuple(tuple(int(x) for x in r) for r in self.rows))
        if any(len(r) != 3 for r in self.rows):
            raise MalformedPartError(f'TrajectoryId.rows must be (env_rank, stage_id, env) triples, got {self.rows}')
        if len(set(self.rows)) != len(self.rows):
            raise MalformedPartError(f'TrajectoryId.rows repeats a row: {self.rows}')

    def cells(self, keys: Iterable[TrajectoryKey]) -> list[Cell]:
        """The (chunk key, env row) cells a trajectory with these keys holds."""
        by_source: dict[tuple[int, int], list[int]] = {}
        for rank, stage, env in self.rows:
            by_source.setdefault((rank, stage), []).append(env)
        return [(k, env) for k in keys for env in by_source.get(k.source_id, ())]

    def to_json(self) -> dict:
        return {'run_id': self.run_id, 'mode': self.mode, 'step_id': self.step_id, 'epoch_id': self.epoch_id,
                'env_rank': self.env_rank, 'stage_id': self.stage_id, 'actor_rank': self.actor_rank,
                'micro_batch': self.micro_batch, 'shard': self.shard, 'episode_id': self.episode_id,
                'rows': [list(r) for r in self.rows]}

    @classmethod
    def from_json(cls, d: dict) -> 'TrajectoryId':
        try:
            return cls(str(d['run_id']), str(d['mode']), int(d['step_id']), int(d['epoch_id']), int(d['env_rank']),
                       int(d['stage_id']), int(d['actor_rank']), int(d['micro_batch']), int(d['shard']),
                       int(d['episode_id']), tuple(tuple(r) for r in d['rows']))
        except (KeyError, TypeError, ValueError) as e:
            raise MalformedPartError(f'corrupt TrajectoryId {d!r}: {e!r}') from None

    def __str__(self) -> str:
        where = f'src={self.env_rank}/{self.stage_id}' if self.env_rank >= 0 else f'actor={self.actor_rank}'
        return (f'{self.run_id}:{self.mode}:step={self.step_id}:epoch={self.epoch_id}:{where}:mb={self.micro_batch}'
                f':shard={self.shard}:ep={self.episode_id}:rows={len(self.rows)}')


class Outbox(Generic[M]):
    """Published-but-unacknowledged messages, each waiting for a set of acknowledgement tokens.

    A message is released once every token it waits for was acknowledged, in one ack or in
    several (a merged PolicyPart waits for each of its chunk keys; a Trajectory for its id).
    """

    def __init__(self, publish: Callable[[M], None], resend_after_s: float = 30.0,
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

    def awaiting(self) -> int:
        """Emitted outputs not yet acknowledged."""
        return len(self._outputs)


@dataclass
class Offer:
    """What the sink did with one trajectory."""

    verdict: str                     # stored | duplicate | rejected | deferred
    trajectory_id: Optional[int] = None
    reason: str = ''


class ExactlyOnceSink:
    """Stores each ``TrajectoryId`` once in a ``TrajectoryReplayBuffer`` and says what to ack.

    A trajectory whose identity is already stored is a re-delivery: acknowledged again, not
    stored. A trajectory with a new identity whose every cell is already stored is also a
    re-delivery (a collector restarted mid-episode rebuilds the tail of an episode it had
    emitted); one that shares only some cells with stored data is rejected, loudly, and not
    acknowledged. Acknowledgements of stored trajectories come from the buffer's
    ``on_durable`` (file, index and their directory entries on disk); a re-delivery that
    arrives before its first copy is durable is not acknowledged early. Identities and cells
    are remembered for the newest ``window`` trajectories (restored from the index on
    start): re-deliveries come only from producers' unacknowledged windows, which the policy
    node's ``max_unacked_keys`` bounds, so the window bounds memory without missing one.
    """

    def __init__(self, buffer, window: int = 1024):
        self.buffer = buffer
        self.window = window
        self._lock = threading.Lock()
        self._ids: OrderedDict[TrajectoryId, list[Cell]] = OrderedDict()
        self._cells: dict[tuple[str, Cell], TrajectoryId] = {}
        self._by_tid: dict[int, TrajectoryId] = {}   # buffer id -> identity, until durable
        self._early: set[int] = set()                # durable before offer() recorded them
        self._acks: list[TrajectoryId] = []
        self.counters = {'stored': 0, 'duplicates': 0, 'rejected': 0, 'deferred': 0, 'acked': 0}
        for ident, keys in buffer.stored_identities(window):
            self._remember(ident, ident.cells(keys))
        if buffer.on_durable is not None:
            raise ValueError('ExactlyOnceSink owns the buffer\'s on_durable callback')
        buffer.on_durable = self._on_durable

    def _remember(self, ident: TrajectoryId, cells: list[Cell]) -> None:
        self._ids[ident] = cells
        for c in cells:
            self._cells[(ident.run_id, c)] = ident
        while len(self._ids) > self.window:
            old, old_cells = self._ids.popitem(last=False)
            for c in old_cells:
                if self._cells.get((old.run_id, c)) == old:
                    del self._cells[(old.run_id, c)]

    def offer(self, traj, block: bool = False) -> Offer:
        """Store ``traj`` (a collector ``Trajectory`` with an identity) unless already stored."""
        from .replay_buffer import BufferFull
        ident = traj.identity
        if ident is None:
            self.counters['rejected'] += 1
            return Offer('rejected', reason='trajectory has no identity (TrajectoryId)')
        cells = ident.cells(traj.keys)
        if not cells:
            self.counters['rejected'] += 1
            return Offer('rejected', reason=f'{ident} names no rows of its keys')
        with self._lock:
            pending = set(self._by_tid.values())  # stored, not yet durable: no ack before it is
            if ident in self._ids:
                if ident in pending:  # its durable callback acknowledges it
                    self.counters['duplicates'] += 1
                    return Offer('duplicate', reason='first copy not yet durable')
                return self._duplicate(ident)
            seen = [c for c in cells if (ident.run_id, c) in self._cells]
            if seen and len(seen) == len(cells):
                if any(self._cells[(ident.run_id, c)] in pending for c in seen):
                    self.counters['deferred'] += 1  # resent later, acknowledged once those are durable
                    return Offer('deferred', reason='its rows are stored but not yet durable')
                return self._duplicate(ident)
            if seen:
                self.counters['rejected'] += 1
                other = self._cells[(ident.run_id, seen[0])]
                return Offer('rejected', reason=f'{ident} shares {len(seen)} of its {len(cells)} rows with stored '
                                                f'{other} (first: key {seen[0][0].as_tuple()} env {seen[0][1]})')
        try:
            tid = self.buffer.add_trajectories([traj], block=block)[0]
        except BufferFull:
            self.counters['deferred'] += 1
            return Offer('deferred', reason='writer queue full')
        with self._lock:
            if tid in self._early:  # already durable: the writer thread was faster than us
                self._early.discard(tid)
                self._acks.append(ident)
            else:
                self._by_tid[tid] = ident
            self._remember(ident, cells)
        self.counters['stored'] += 1
        return Offer('stored', tid)

    def _duplicate(self, ident: TrajectoryId) -> Offer:  # under self._lock
        self.counters['duplicates'] += 1
        self._acks.append(ident)
        return Offer('duplicate')

    def _on_durable(self, tid: int) -> None:  # writer thread
        with self._lock:
            ident = self._by_tid.pop(tid, None)
            if ident is None:
                self._early.add(tid)
            else:
                self._acks.append(ident)

    def take_acks(self) -> list[TrajectoryId]:
        """Identities to acknowledge now (durable, or re-deliveries of stored ones)."""
        with self._lock:
            acks, self._acks = self._acks, []
        self.counters['acked'] += len(acks)
        return acks

    def remembered(self) -> int:
        return len(self._ids)


__all__ = ['new_run_id', 'TrajectoryId', 'Outbox', 'RecentKeys', 'RowLedger', 'ExactlyOnceSink', 'Offer']
