"""What learning needs of a policy: a small protocol instead of attribute names.

``learning/`` trains any model that offers these (``ActorCritic`` does): the PPO update calls
``evaluate``; behaviour cloning fits ``action_mean`` with ``actor_parameters`` (so a critic,
whatever it is called, is never cloned) and sets the exploration noise with ``set_action_std``;
``merge_obs_stats`` folds the states it trained on into the model's normalizer.
"""
from __future__ import annotations

from typing import Iterator, Protocol, runtime_checkable

import torch


@runtime_checkable
class TrainablePolicy(Protocol):
    def evaluate(self, obs: dict, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Differentiable (log-probabilities [N, C*A], entropy [N, C*A], values [N])."""

    def action_mean(self, obs: dict) -> torch.Tensor:
        """The policy's mean action chunk [N, C*A] (differentiable)."""

    def actor_parameters(self) -> Iterator[torch.nn.Parameter]:
        """The parameters of the action mean (not the critic's, not the exploration noise)."""

    def set_action_std(self, std: torch.Tensor) -> None:
        """Exploration noise per action entry [C*A]."""

    def action_std(self) -> torch.Tensor:
        ...

    def merge_obs_stats(self, count: float, mean: torch.Tensor, var: torch.Tensor) -> None:
        ...


__all__ = ['TrainablePolicy']
