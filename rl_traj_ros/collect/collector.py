"""TrajectoryCollector: joins parts, accumulates steps and flushes per output mode (spec §5).

The collector owns control flow only (which keys complete which scope); the strategies own
what a completed scope becomes. Sources, epochs and chunk counts come from the
``TrajectoryPlan`` so completeness never depends on arrival order.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Optional, Union

from ..params.defaults import COLLECTOR
from ..data.identity import Cell, TrajectoryId
from ..data.schema import EnvPart, MalformedPartError, PolicyPart, TrajectoryKey
from ..delivery.ledger import RowLedger
from .joiner import ChunkJoiner, DuplicateChunkError
from .modes import MODE_TYPES, CollectorOutput, Episode
from .plan import MODES, SourceId, TrajectoryPlan
from .steps import TrajectoryAccumulator, TrajectoryStep


class TrajectoryCollector:
    """Push PolicyParts/EnvParts in any order; get flushed outputs when scopes complete."""

    def __init__(self, plan: TrajectoryPlan, run_id: str = COLLECTOR.run_id):
        self.plan = plan
        self.run_id = run_id
        self.joiner: ChunkJoiner = ChunkJoiner(plan.batch_size)
        self.ledger = RowLedger()  # which rows of joined chunks are not yet stored downstream
        self._acc: dict[Hashable, TrajectoryAccumulator] = defaultdict(TrajectoryAccumulator)
        self.mode = MODE_TYPES[plan.mode](plan, self)
        self.stats = {'parts': 0, 'joined': 0, 'rejected': 0, 'flushed': 0, 'build_failures': 0, 'dropped_episodes': 0,
                      'dropped_rows': 0}
        self._failed: set[TrajectoryKey] = set()
        self._settled: list[TrajectoryKey] = []  # every row stored (or dropped on purpose): ack upstream
        self._last_outputs: list[CollectorOutput] = []

    # -- public ------------------------------------------------------------------------------
    def push(self, part: Union[PolicyPart, EnvPart]) -> list[CollectorOutput]:
        """Add one part; return whatever scopes it completed.

        A malformed part raises ``MalformedPartError`` and changes nothing. If building a
        ready chunk fails, its halves stay stored and the error propagates; the next push
        (or ``retry``) builds it again.
        """
        self._last_outputs = []
        try:
            for src in part.sources:
                if src.key.source_id not in self.plan.sources:
                    raise MalformedPartError(f'part for unknown source {src.key.source_id}; plan sources are '
                                             f'{self.plan.sources}')
                if src.key.epoch_id >= self.plan.num_epochs or src.key.chunk_id >= self.plan.chunks_per_epoch:
                    raise MalformedPartError(f'key {src.key.as_tuple()} is outside the plan '
                                             f'({self.plan.num_epochs} epochs x {self.plan.chunks_per_epoch} chunks)')
            part.validate()
            if isinstance(part, PolicyPart) and part.output is None and self.mode.trains:
                raise MalformedPartError(
                    f'PolicyPart for {[s.key.as_tuple() for s in part.sources]} carries only external_actions, but '
                    f'{self.plan.mode} mode trains on the policy\'s log-probabilities and values; send a policy '
                    "output, or collect such chunks in 'lerobot' mode")
            self.joiner.add(part)
        except DuplicateChunkError:
            # a resend of a built chunk: if its rows are all stored, our KeyAck was lost: ack again
            self._settled.extend(s.key for s in part.sources
                                 if self.joiner.was_completed(s.key) and not self.ledger.is_open(s.key))
            raise
        except MalformedPartError:
            self.stats['rejected'] += 1
            raise
        self.stats['parts'] += 1
        self._failed.difference_update(s.key for s in part.sources)  # a re-delivered half: try again
        return self.retry()

    def take_outputs_after_error(self) -> list[CollectorOutput]:
        """Outputs a push flushed before it raised for another key (they must not be lost)."""
        out, self._last_outputs = self._last_outputs, []
        return out

    def expire(self, max_age_s: float) -> list[TrajectoryKey]:
        """Drop keys (incomplete, or failing to build) older than ``max_age_s``."""
        stale = self.joiner.expire(max_age_s, include_ready=True)
        self._failed.difference_update(stale)
        return stale

    def retry(self) -> list[CollectorOutput]:
        """Build every ready key. A key whose build fails keeps its halves and is skipped until
        one of its halves is delivered again, so one bad key never blocks the others; the first
        failure is re-raised after all other keys were processed."""
        outputs: list[CollectorOutput] = []
        first_error: Optional[BaseException] = None
        for key in self.joiner.ready_keys():
            if key in self._failed:
                continue
            scope = self.mode.scope(key)
            try:
                self.joiner.complete(key, lambda chunk, s=scope: self._acc[s].append(
                    TrajectoryStep.from_parts(chunk, self.plan.collect)))
            except Exception as e:  # noqa: BLE001 - kept for a retry; reported below
                self.stats['build_failures'] += 1
                self._failed.add(key)
                first_error = first_error or e
                continue
            self.stats['joined'] += 1
            self.ledger.joined(key, self.plan.batch_size(key.source_id))
            if len(self._acc[scope]) == self.mode.scope_size():
                acc = self._acc.pop(scope)
                outputs.extend(self.mode.flush(scope, acc.take(acc.keys())))
        self.stats['flushed'] += len(outputs)
        self._last_outputs = outputs
        if first_error is not None:
            raise first_error
        return outputs

    # -- acknowledgements ----------------------------------------------------------------------
    def acknowledge(self, identities) -> None:
        """The writer durably stored these outputs: their rows are settled."""
        for ident in identities:
            self._settle(self.ledger.settle(ident))

    def _settle(self, keys: list[TrajectoryKey]) -> None:
        self.joiner.retire(keys)
        self._settled.extend(keys)

    def take_settled(self) -> list[TrajectoryKey]:
        """Chunk keys whose every env row is stored (or was dropped on purpose): what the
        collector acknowledges upstream, so producers may forget those parts."""
        out, self._settled = self._settled, []
        return out

    def emit(self, out: CollectorOutput, ident: TrajectoryId) -> CollectorOutput:
        """A mode's output gets its identity and its rows are recorded as awaiting the writer."""
        traj = out.trajectory
        sources = {r[:2] for r in ident.rows}
        traj.keys = [k for k in traj.keys if k.source_id in sources]  # exactly the keys its rows come from
        traj.identity = ident
        self.ledger.emitted(ident, ident.cells(traj.keys))
        return out

    def pending(self) -> dict:
        return {'parts': self.joiner.pending(), 'steps': {s: len(a) for s, a in self._acc.items() if len(a)}}

    def drop(self, cells: list[Cell]) -> None:
        """A mode consumed these rows on purpose (a failed episode with ``only_success``)."""
        self.stats['dropped_episodes'] += 1
        self.stats['dropped_rows'] += len(cells)
        self._settle(self.ledger.discard(cells))

    def open_episodes(self) -> dict[tuple[SourceId, int], int]:
        """Chunks held per unfinished episode (lerobot: they carry over to the next step)."""
        return self.mode.open_episodes()

    def open_cells(self) -> list[tuple[TrajectoryKey, int]]:
        """The (chunk key, env row) cells joined but held back by the mode (unfinished episodes)."""
        return self.mode.open_cells()


__all__ = ['TrajectoryPlan', 'TrajectoryCollector', 'CollectorOutput', 'Episode', 'MODES']
