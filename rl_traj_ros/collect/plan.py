"""TrajectoryPlan: the shape of one training step's rollout and what to emit for it (spec §5)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..params.defaults import COLLECTOR
from ..data.schema import MalformedPartError
from ..params.shared import GAE_LAMBDA, GAMMA
from .steps import CollectConfig

SourceId = tuple[int, int]
MODES = ('rollout', 'pipeline', 'lerobot')


@dataclass
class TrajectoryPlan:
    """Shape of one training step's rollout and what to emit when a scope completes."""

    mode: str = COLLECTOR.mode
    num_epochs: int = COLLECTOR.num_epochs
    chunks_per_epoch: int = COLLECTOR.chunks_per_epoch
    sources: list[SourceId] = field(default_factory=lambda: [(0, 0)])
    envs_per_source: Union[int, dict[SourceId, int]] = 1
    collect: CollectConfig = field(default_factory=CollectConfig)
    num_shards: int = COLLECTOR.num_shards                 # rollout: split each source's Trajectory along envs
    num_actors: int = COLLECTOR.num_actors                 # pipeline
    micro_batch_size: int = COLLECTOR.micro_batch_size  # pipeline: env rows per micro-batch; 0: all of an actor's
    shuffle_micro_batches: bool = COLLECTOR.shuffle_micro_batches
    normalize_advantages: bool = COLLECTOR.normalize_advantages
    gamma: float = GAMMA
    gae_lambda: float = GAE_LAMBDA
    seed: int = COLLECTOR.seed
    only_success: bool = COLLECTOR.only_success          # lerobot
    success_reward: float = COLLECTOR.success_reward         # lerobot: an episode succeeded if a reward reached this

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f'mode must be one of {MODES}, got {self.mode!r}')
        if self.num_epochs < 1 or self.chunks_per_epoch < 1:
            raise ValueError('num_epochs and chunks_per_epoch must be >= 1')
        # rows are routed to actors in sorted (env_rank, stage_id) order, whatever order the
        # config lists the sources in (spec §5: source s owns rows [s*N/S, (s+1)*N/S))
        self.sources = sorted(tuple(s) for s in self.sources)
        if len(set(self.sources)) != len(self.sources):
            raise ValueError(f'duplicate sources in {self.sources}')
        if self.mode == 'pipeline':
            rows = sum(self.batch_size(s) for s in self.sources)
            if rows % self.num_actors:
                raise ValueError(f'{rows} env rows cannot be routed evenly to {self.num_actors} actors')
            per_actor = rows // self.num_actors
            if self.micro_batch_size and per_actor % self.micro_batch_size:
                raise ValueError(f'micro_batch_size {self.micro_batch_size} must divide the {per_actor} rows per actor')

    def batch_size(self, source: SourceId) -> int:
        if isinstance(self.envs_per_source, dict):
            if source not in self.envs_per_source:
                raise MalformedPartError(f'unknown source {source}; plan sources are {self.sources}')
            return self.envs_per_source[source]
        return int(self.envs_per_source)

    @property
    def keys_per_source_step(self) -> int:
        return self.num_epochs * self.chunks_per_epoch

