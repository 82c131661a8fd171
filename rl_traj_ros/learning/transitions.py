"""Stored rows -> the transitions an off-policy learner trains on (RLPD, SAC).

A stored row (``storage.layout``) is one chunk of one env: ``curr_obs/*``, the executed action
chunk ``actions [C*A]``, per-slot ``rewards``/``dones``/``terminations``/``truncations [C]``,
``intervene_flags [C*A]`` and ``next_obs/*``. As one transition of the chunk-level MDP, with a
discount per control step ``gamma``: the chunk's return counts the slots up to and including
its first done (under auto-reset the later slots belong to the next episode, and ``next_obs``
is the pre-reset observation of that first done), ``R = sum_i gamma^i r_i``, and the bootstrap
factor is ``gamma^(k+1)`` after ``k+1`` slots, 0 when the episode terminated (a truncation
still bootstraps).

``success_reward`` (RLPD's ``success_ends_episode``): a slot whose reward reaches it ends the
episode there as a termination. A recording that goes on after a success (``steps_after_success``:
frames that show the task done, for a success classifier) stores those steps as rewards without an
end; read as they are, a demonstration's success is worth a run of rewards (up to ~9 with a tail
of 10 at gamma 0.97) where the run's own success pays 1 and ends, and the critics fit both.
"""
from __future__ import annotations

from dataclasses import dataclass

from typing import Optional

import torch

REQUIRED = ('curr_obs/states', 'next_obs/states', 'actions', 'rewards', 'dones', 'terminations', 'truncations',
            'intervene_flags')


@dataclass
class TransitionBatch:
    obs: dict[str, torch.Tensor]        # 'states' [N, S] (+ 'main_images' [N, H, W, 3] uint8)
    actions: torch.Tensor               # [N, C*A] the executed chunk (interventions applied)
    rewards: torch.Tensor               # [N] discounted return of the chunk's slots up to its first done
    discounts: torch.Tensor             # [N] gamma^(slots counted), 0 after a termination
    next_obs: dict[str, torch.Tensor]
    intervened: torch.Tensor            # [N] bool: a human (or scripted operator) drove some slot
    weights: Optional[torch.Tensor] = None  # [N] importance weights of a prioritized draw (None: all 1)

    def __len__(self) -> int:
        return self.actions.shape[0]


def check_rows(fields, where: str) -> None:
    """Refuse rows that are not whole transitions, naming what is missing and where."""
    missing = [k for k in REQUIRED if k not in fields]
    if missing:
        hint = (' (demonstrations recorded before rl_traj_ros stored observations with them: record them again '
                'with `run real_collect` or `run sim_collect --config config/sim_demos.yaml`)'
                if any(k.startswith(('curr_obs', 'next_obs')) for k in missing) else '')
        raise ValueError(f'{where} has no {", ".join(missing)}: not whole transitions{hint}')


def obs_of(rows: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    n = len(prefix) + 1
    return {k[n:]: v for k, v in rows.items() if k.startswith(prefix + '/') and '/' not in k[n:]}


def to_transitions(rows: dict[str, torch.Tensor], gamma: float, success_reward: Optional[float] = None) -> TransitionBatch:
    r = rows['rewards'].to(torch.float32)
    n, c = r.shape
    d = rows['dones'].reshape(n, c).to(torch.bool)
    term = rows['terminations'].reshape(n, c).to(torch.bool)
    if success_reward is not None:
        hit = r >= success_reward
        d, term = d | hit, term | hit
    ended = d.any(1)
    first = torch.where(ended, d.to(torch.int64).argmax(1), torch.full((n,), c - 1))
    slots = torch.arange(c)
    counted = slots[None, :] <= first[:, None]
    powers = gamma ** slots.to(torch.float32)
    ret = (r * powers * counted).sum(1)
    terminated = ended & term[torch.arange(n), first]
    discounts = (gamma ** (first + 1).to(torch.float32)) * (~terminated).to(torch.float32)
    return TransitionBatch(obs_of(rows, 'curr_obs'), rows['actions'].to(torch.float32), ret, discounts,
                           obs_of(rows, 'next_obs'), rows['intervene_flags'].reshape(n, -1).to(torch.bool).any(1),
                           rows.get('index/weight'))


__all__ = ['TransitionBatch', 'REQUIRED', 'check_rows', 'obs_of', 'to_transitions']
