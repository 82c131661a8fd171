"""Advantage estimators and loss masks over the ``Trajectory`` layout (GAE, RLinf's masks).

The one implementation both the pipeline collector (advantages computed at flush) and the
learner (advantages computed from rollout trajectories) call.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..data.trajectory import Trajectory, chunk_starts

def compute_gae(rewards: torch.Tensor, prev_values: torch.Tensor, dones: torch.Tensor, num_epochs: int,
                gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over chunk-level rewards (sum over C) and dones (max over C), per epoch.

    ``rewards [T,B,C]``, ``prev_values [T+E,B,1]``, ``dones [T+E,B,C]`` in the
    ``Trajectory`` layout; returns ``advantages, returns`` of shape ``[T,B,1]``. The one
    implementation both the pipeline collector and the non-pipeline learner path call.
    """
    t_total, b = rewards.shape[:2]
    chunks = t_total // num_epochs
    r = rewards.to(torch.float32).sum(-1)
    d = dones.to(torch.float32).amax(-1)
    v = prev_values.to(torch.float32)[..., 0]
    adv = torch.zeros(t_total, b)
    for e in range(num_epochs):
        rs, ve, de = r[e * chunks:(e + 1) * chunks], v[e * (chunks + 1):(e + 1) * (chunks + 1)], \
            d[e * (chunks + 1):(e + 1) * (chunks + 1)]
        last = torch.zeros(b)
        for t in reversed(range(chunks)):
            nonterminal = 1.0 - de[t + 1]
            delta = rs[t] + gamma * ve[t + 1] * nonterminal - ve[t]
            last = delta + gamma * gae_lambda * nonterminal * last
            adv[e * chunks + t] = last
    values = chunk_starts(v, num_epochs)
    return adv.unsqueeze(-1), (adv + values).unsqueeze(-1)

def compute_loss_mask(dones: torch.Tensor, num_epochs: int) -> torch.Tensor:
    """Valid control steps without auto-reset, as RLinf's loss-mask computation: per epoch and
    env, a step counts until (and including) the env's first done; later steps (the env sat
    finished) are masked. ``dones [T+E, B, C]`` in the Trajectory layout -> ``[T, B, C]`` bool;
    the epoch's ``d_before`` counts as a done before its first step."""
    t_e, b, c = dones.shape
    chunks = t_e // num_epochs - 1
    out = []
    for e in range(num_epochs):
        d = dones[e * (chunks + 1):(e + 1) * (chunks + 1)].to(torch.int64)     # [L+1, B, C]
        flat = d.permute(1, 0, 2).reshape(b, -1)[:, c - 1:]                     # d_before's last slot, then steps
        valid = (flat.cumsum(1) == 0)[:, :-1]                                   # no done strictly before the step
        out.append(valid.reshape(b, chunks, c).permute(1, 0, 2))
    return torch.cat(out)

def masked_normalize(x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """``(x - mean) / sqrt(var + 1e-5)`` with population statistics over the entries where
    ``mask`` is set (all entries without a mask), applied to EVERY entry: RLinf's masked
    normalization (masked-out entries carry no loss, but they are not left on another scale)."""
    if mask is None:
        return (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + 1e-5)
    m = mask.to(torch.bool).expand_as(x)
    if not bool(m.any()):
        return x
    sel = x[m]
    mean, var = sel.mean(), sel.var(unbiased=False)
    return (x - mean) / torch.sqrt(var + 1e-5)

def trajectory_advantages(traj: Trajectory, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    return compute_gae(traj.rewards, traj.prev_values, traj.dones, traj.num_epochs, gamma, gae_lambda)


__all__ = ['compute_gae', 'compute_loss_mask', 'masked_normalize', 'trajectory_advantages']
