"""One finished episode of one env, as the wrappers hand it to a writer."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REWARD_FROM_ENV = 0   # a step's reward source when nothing else decided it (rewards.detector.Source.ENV)


@dataclass
class EpisodeRecord:
    env_idx: int
    episode_id: int
    observations: list = field(default_factory=list)  # num_steps + 1 (the reset obs first)
    actions: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    terminated: list = field(default_factory=list)
    truncated: list = field(default_factory=list)
    infos: list = field(default_factory=list)
    interventions: list = field(default_factory=list)  # per step: the operator's action was executed
    reward_sources: list = field(default_factory=list)  # per step: what gave the reward (rewards.detector.Source)
    step_successes: list = field(default_factory=list)  # per step: the step succeeded (and the steps after it)
    success: bool = False

    @property
    def num_steps(self) -> int:
        return len(self.actions)

    def as_dict(self, rank: int) -> dict[str, Any]:
        return {'rank': rank, 'env_idx': self.env_idx, 'episode_id': self.episode_id, 'success': self.success,
                'observations': self.observations, 'actions': self.actions, 'rewards': self.rewards,
                'terminated': self.terminated, 'truncated': self.truncated, 'infos': self.infos}
