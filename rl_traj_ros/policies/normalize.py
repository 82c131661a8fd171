"""The one state normalizer both policy families use: ``clip((states - mean) / std)`` per dimension.

A robot state mixes joint angles of ~1 rad with a cube offset of a few centimetres; unscaled,
the centimetres that decide a grasp are drowned in the first layer. The statistics are buffers,
so they travel with the actor's weights to the policy node and into checkpoints, and the policy
normalizes exactly as the update did. Two ways to set them, one per algorithm:

- ``fit`` (RLPD): once, from the demonstrations, before the first gradient step;
- ``merge`` (PPO): the running moments of every batch trained on (Chan et al.'s parallel update).

``std`` is floored at ``min_std`` when used, so a dimension the data never moved does not blow up
later; identity (mean 0, var 1) until set.
"""
from __future__ import annotations

import torch
from torch import nn


class StateNormalizer(nn.Module):
    def __init__(self, dim: int, min_std: float, clip: float):
        super().__init__()
        self.min_std, self.clip = float(min_std), float(clip)
        self.register_buffer('mean', torch.zeros(dim))
        self.register_buffer('var', torch.ones(dim))
        self.register_buffer('count', torch.zeros(()))

    @property
    def std(self) -> torch.Tensor:
        return self.var.sqrt().clamp_min(self.min_std)

    @torch.no_grad()
    def fit(self, states: torch.Tensor) -> None:
        states = states.reshape(-1, self.mean.shape[0]).to(torch.float64)
        self.mean.copy_(states.mean(0))
        self.var.copy_(states.var(0, unbiased=False))
        self.count.fill_(states.shape[0])

    @torch.no_grad()
    def merge(self, count: float, mean: torch.Tensor, var: torch.Tensor) -> None:
        """Fold a batch's moments (``count`` states of ``mean`` and ``var``) into the running ones."""
        if count <= 0:
            return
        n0 = self.count.item()
        n = n0 + count
        delta = mean.to(self.mean) - self.mean
        m2 = self.var * n0 + var.to(self.var) * count + delta ** 2 * n0 * count / n
        self.mean += delta * count / n
        self.var.copy_(m2 / n)
        self.count.fill_(n)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return ((states.to(torch.float32) - self.mean) / self.std).clamp(-self.clip, self.clip)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """Weights saved by earlier versions still load: RLPD's kept ``std`` (no ``var``, no
        ``count``), and weights from before states were standardized have no statistics (the
        identity they were trained with)."""
        std = state_dict.pop(prefix + 'std', None)
        if std is not None:
            state_dict.setdefault(prefix + 'var', std.pow(2))
        for name, value in (('mean', 0.0), ('var', 1.0), ('count', 0.0)):
            state_dict.setdefault(prefix + name, torch.full_like(getattr(self, name), value))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


__all__ = ['StateNormalizer']
