"""What one stored trajectory is: its ``TrajectoryId``, and the run it belongs to.

The identity is the one record of a trajectory's metadata (run, step, epoch, source, actor,
micro-batch, shard, episode, env rows): the collector stamps it, the wire carries it, the
writer dedupes and indexes by it and the learner filters by it.
"""
from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Iterable

from .schema import MalformedPartError, TrajectoryKey

Row = tuple[int, int, int]          # (env_rank, stage_id, env index in that source's batch)

Cell = tuple[TrajectoryKey, int]    # one env row of one chunk

def new_run_id(prefix: str = '') -> str:
    """A run name unique across hosts and restarts of the launcher: time, host, pid, random."""
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


__all__ = ['Row', 'Cell', 'new_run_id', 'TrajectoryId']
