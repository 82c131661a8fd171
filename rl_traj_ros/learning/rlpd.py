"""RLPD / SAC over action chunks, ROS-free: the losses and one gradient step (``RLPDUpdater``).

Critic: ``E`` LayerNorm Q-functions (``policies.sac.CriticEnsemble``) regress onto
``y = R + discount * min_{j in J} Q'_j(s', a')`` with ``a' ~ pi(s')``, ``J`` a random subset of
``critic_subsample`` target critics (REDQ / RLPD; 2 of 2 is SAC's clipped double Q), targets
Polyak-averaged with ``tau``; ``backup_entropy`` subtracts ``alpha * log pi(a'|s')`` inside the
target (SAC; RLPD and RLinf's Franka configs leave it out). ``R`` and ``discount`` are the
chunk's (``transitions.to_transitions``: discount per control step, the slots up to the first
done). Actor: minimize ``alpha * log pi(a|s) - mean_j Q_j(s, a)`` once every
``critic_actor_ratio`` critic steps. Temperature: ``alpha = exp(log_alpha)`` learned so that
the entropy approaches ``target_entropy`` (default ``-|A|/2`` over the chunk's entries).
Images (optional) are shifted randomly by up to ``image_pad`` pixels (DrQ) at every step.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional

import torch
from torch.nn import functional as F

from ..params.defaults import RLPD
from ..policies.sac import CriticEnsemble, SquashedGaussianActor
from .transitions import TransitionBatch


@dataclass
class RLPDConfig:
    """RLPD's settings; defaults are the learner node's for ``algorithm: rlpd`` (``params/``)."""

    batch_size: int = RLPD.batch_size
    gamma: float = RLPD.gamma               # per control step
    tau: float = RLPD.tau
    actor_lr: float = RLPD.lr
    critic_lr: float = RLPD.lr
    temperature_lr: float = RLPD.lr
    init_temperature: float = RLPD.init_temperature
    target_entropy: Optional[float] = None   # None: -|A|/2, |A| = chunk x action_dim
    num_critics: int = RLPD.num_critics
    critic_subsample: int = RLPD.critic_subsample
    critic_actor_ratio: int = RLPD.critic_actor_ratio
    backup_entropy: bool = RLPD.backup_entropy
    grad_clip: float = RLPD.max_grad_norm
    image_pad: int = 4


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """DrQ's augmentation: pad by replication, crop back at a random offset per image."""
    n, h, w, _ = images.shape
    x = F.pad(images.permute(0, 3, 1, 2).to(torch.float32), (pad, pad, pad, pad), mode='replicate')
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    rows = (torch.arange(h)[None, :] + dy[:, None])[:, :, None].expand(n, h, w)
    cols = (torch.arange(w)[None, :] + dx[:, None])[:, None, :].expand(n, h, w)
    out = x[torch.arange(n)[:, None, None], :, rows, cols]   # [n, h, w, C]
    return out.to(images.dtype)


class RLPDUpdater:
    def __init__(self, actor: SquashedGaussianActor, critics: CriticEnsemble, cfg: RLPDConfig, seed: int = RLPD.seed):
        if not 1 <= cfg.critic_subsample <= critics.members:
            raise ValueError(f'critic_subsample must be in [1, {critics.members}], got {cfg.critic_subsample}')
        self.actor, self.critics, self.cfg = actor, critics, cfg
        self.target = copy.deepcopy(critics).requires_grad_(False)
        self.log_alpha = torch.tensor(float(cfg.init_temperature)).log().requires_grad_(True)
        self.target_entropy = (cfg.target_entropy if cfg.target_entropy is not None
                               else -actor.chunk * actor.action_dim / 2.0)
        self.actor_opt = torch.optim.Adam(actor.parameters(), lr=cfg.actor_lr, foreach=True)
        self.critic_opt = torch.optim.Adam(critics.parameters(), lr=cfg.critic_lr, foreach=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.temperature_lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.steps = 0
        self.td_errors = torch.zeros(0)  # the last critic step's |TD error| per row

    def fit_state_normalizer(self, states: torch.Tensor) -> None:
        """Standardize states by these statistics in the actor, the critics and their targets alike."""
        self.actor.norm.fit(states)
        for net in (self.critics, self.target):
            net.norm.load_state_dict(self.actor.norm.state_dict())

    def normalized(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions in the actor's [-1, 1] (the env's units over ``action_scale``): what the critics
        see, so an xyz step of 2.5 cm weighs as much in Q as a full gripper command."""
        return actions / self.actor.scale

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def augment(self, b: TransitionBatch) -> TransitionBatch:
        if 'main_images' not in b.obs or not self.cfg.image_pad:
            return b
        shift = lambda o: {**o, 'main_images': random_shift(o['main_images'], self.cfg.image_pad, self.generator)}  # noqa: E731
        return TransitionBatch(shift(b.obs), b.actions, b.rewards, b.discounts, shift(b.next_obs), b.intervened,
                               b.weights)

    def target_q(self, b: TransitionBatch) -> torch.Tensor:
        """``R + discount * (min over a random critic subset of Q'(s', a') [- alpha log pi])``."""
        with torch.no_grad():
            next_a, next_logp = self.actor.sample(b.next_obs, self.generator)
            q = self.target(b.next_obs, self.normalized(next_a))
            pick = torch.randperm(q.shape[0], generator=self.generator)[:self.cfg.critic_subsample]
            q_next = q[pick].min(0).values
            if self.cfg.backup_entropy:
                q_next = q_next - self.alpha * next_logp
            return b.rewards + b.discounts * q_next

    def critic_loss(self, b: TransitionBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean squared error of every member against the shared target (each row weighted by its
        importance weight when the batch is a prioritized draw); also the Q values. The rows'
        |TD errors| (ensemble mean) stay in ``td_errors`` for a prioritized sampler."""
        q = self.critics(b.obs, self.normalized(b.actions))
        err = q - self.target_q(b).unsqueeze(0)
        self.td_errors = err.detach().abs().mean(0)
        sq = err ** 2
        if b.weights is not None:
            sq = sq * b.weights.to(sq).unsqueeze(0)
        return sq.mean(), q.detach()

    def actor_loss(self, b: TransitionBatch) -> tuple[torch.Tensor, torch.Tensor]:
        a, logp = self.actor.sample(b.obs, self.generator)
        q = self.critics(b.obs, self.normalized(a)).mean(0)
        return (self.alpha * logp - q).mean(), logp.detach()

    def temperature_loss(self, logp: torch.Tensor) -> torch.Tensor:
        return (self.log_alpha.exp() * (-logp - self.target_entropy)).mean()

    def step(self, b: TransitionBatch) -> dict[str, float]:
        """One critic step (and, every ``critic_actor_ratio``-th, an actor and temperature step)."""
        cfg = self.cfg
        b = self.augment(b)
        loss, q = self.critic_loss(b)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.critics.parameters(), cfg.grad_clip)
        self.critic_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target.parameters()), list(self.critics.parameters()), cfg.tau)
        self.steps += 1
        out = {'critic_loss': float(loss.detach()), 'q_mean': float(q.mean()), 'q_std_members': float(q.std(0).mean())}
        if self.steps % cfg.critic_actor_ratio == 0:
            for p in self.critics.parameters():
                p.requires_grad_(False)
            a_loss, logp = self.actor_loss(b)
            for p in self.critics.parameters():
                p.requires_grad_(True)
            self.actor_opt.zero_grad(set_to_none=True)
            a_loss.backward()
            torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.grad_clip)
            self.actor_opt.step()
            t_loss = self.temperature_loss(logp)
            self.alpha_opt.zero_grad(set_to_none=True)
            t_loss.backward()
            self.alpha_opt.step()
            out.update(actor_loss=float(a_loss.detach()), entropy=float(-logp.mean()), temperature=float(self.alpha))
        return out

    def state_dict(self) -> dict:
        return {'actor': self.actor.state_dict(), 'critics': self.critics.state_dict(),
                'target': self.target.state_dict(), 'log_alpha': self.log_alpha.detach().clone(),
                'actor_opt': self.actor_opt.state_dict(), 'critic_opt': self.critic_opt.state_dict(),
                'alpha_opt': self.alpha_opt.state_dict(), 'generator': self.generator.get_state(),
                'steps': self.steps}

    def load_state_dict(self, s: dict) -> None:
        self.actor.load_state_dict(s['actor'])
        self.critics.load_state_dict(s['critics'])
        self.target.load_state_dict(s['target'])
        with torch.no_grad():
            self.log_alpha.copy_(s['log_alpha'])
        self.actor_opt.load_state_dict(s['actor_opt'])
        self.critic_opt.load_state_dict(s['critic_opt'])
        self.alpha_opt.load_state_dict(s['alpha_opt'])
        self.generator.set_state(s['generator'])
        self.steps = int(s['steps'])


__all__ = ['RLPDConfig', 'RLPDUpdater', 'random_shift']
