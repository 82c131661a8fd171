"""A small torch actor-critic for action chunks: MLP over states, optional CNN over the main image.

Sampling is seeded per TrajectoryKey, so the same request gives the same actions in any
process and any order: what lets the ROS pipeline be checked tensor-for-tensor against an
in-process run. Weights load with ``weights_only=True`` (safe for untrusted files).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn


class ActorCritic(nn.Module):
    def __init__(self, state_dim: int, action_dim: int, chunk: int, hidden: int = 128, use_images: bool = False,
                 image_size: int = 128, init_log_std: float = -1.0, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.action_dim, self.chunk, self.use_images = action_dim, chunk, use_images
        feat = state_dim
        if use_images:
            self.cnn = nn.Sequential(nn.Conv2d(3, 16, 8, 4), nn.ReLU(), nn.Conv2d(16, 32, 4, 2), nn.ReLU(),
                                     nn.AdaptiveAvgPool2d(4), nn.Flatten())
            feat += 32 * 16
        self.trunk = nn.Sequential(nn.Linear(feat, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.mean = nn.Linear(hidden, chunk * action_dim)
        self.value = nn.Linear(hidden, 1)
        self.log_std = nn.Parameter(torch.full((chunk * action_dim,), init_log_std))

    @property
    def device(self) -> torch.device:
        return self.value.weight.device

    def features(self, obs: dict) -> torch.Tensor:
        x = obs['states'].to(self.device, torch.float32)
        if self.use_images:
            img = obs['main_images'].to(self.device).permute(0, 3, 1, 2).to(torch.float32) / 255.0
            x = torch.cat([x, self.cnn(img)], dim=1)
        return self.trunk(x)

    def dist(self, h: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(torch.tanh(self.mean(h)), self.log_std.exp())

    @torch.no_grad()
    def act(self, obs: dict, generator: Optional[torch.Generator] = None,
            actions: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(actions [B, C*A] in [-1, 1], per-dim logprobs [B, C*A], values [B, 1]).

        Given ``actions`` (an expert's), returns their logprobs under the policy instead.
        """
        h = self.features(obs)
        d = self.dist(h)
        if actions is None:  # noise drawn on the CPU: the same actions on any device
            noise = torch.randn(d.mean.shape, generator=generator).to(self.device)
            actions = (d.mean + d.stddev * noise).clamp(-1.0, 1.0)
        else:
            actions = actions.to(self.device)
        return actions.cpu(), d.log_prob(actions).cpu(), self.value(h).cpu()

    def evaluate(self, obs: dict, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Differentiable (logprobs [N, C*A], entropy [N, C*A], values [N]) of given actions:
        what the PPO update needs (core/ppo.py)."""
        h = self.features(obs)
        d = self.dist(h)
        return d.log_prob(actions.to(self.device)), d.entropy(), self.value(h)[..., 0]

    @torch.no_grad()
    def values(self, obs: dict) -> torch.Tensor:
        return self.value(self.features(obs)).cpu()

    def load_weights(self, path: str) -> None:
        self.load_state_dict(torch.load(path, map_location='cpu', weights_only=True))
