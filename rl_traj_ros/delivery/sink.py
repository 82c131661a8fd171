"""The writer's side of end-to-end delivery: each identity stored once, acked once durable."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from ..data.identity import Cell, TrajectoryId
from ..storage.replay_buffer import BufferFull

@dataclass
class Offer:
    """What the sink did with one trajectory."""

    verdict: str                     # stored | duplicate | rejected | deferred
    seq: Optional[int] = None        # its sequence number in the buffer
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
        self._by_seq: dict[int, TrajectoryId] = {}   # buffer seq -> identity, until durable
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
        ident = traj.identity
        if ident is None:
            self.counters['rejected'] += 1
            return Offer('rejected', reason='trajectory has no identity (TrajectoryId)')
        cells = ident.cells(traj.keys)
        if not cells:
            self.counters['rejected'] += 1
            return Offer('rejected', reason=f'{ident} names no rows of its keys')
        with self._lock:
            pending = set(self._by_seq.values())  # stored, not yet durable: no ack before it is
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
            seq = self.buffer.add_trajectories([traj], block=block)[0]
        except BufferFull:
            self.counters['deferred'] += 1
            return Offer('deferred', reason='writer queue full')
        with self._lock:
            if seq in self._early:  # already durable: the writer thread was faster than us
                self._early.discard(seq)
                self._acks.append(ident)
            else:
                self._by_seq[seq] = ident
            self._remember(ident, cells)
        self.counters['stored'] += 1
        return Offer('stored', seq)

    def _duplicate(self, ident: TrajectoryId) -> Offer:  # under self._lock
        self.counters['duplicates'] += 1
        self._acks.append(ident)
        return Offer('duplicate')

    def _on_durable(self, seq: int) -> None:  # writer thread
        with self._lock:
            ident = self._by_seq.pop(seq, None)
            if ident is None:
                self._early.add(seq)
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


__all__ = ['Offer', 'ExactlyOnceSink']
