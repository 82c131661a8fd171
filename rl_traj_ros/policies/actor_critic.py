"""A small torch actor-critic for action chunks: MLPs over normalized states, optional CNN over
the main image.

Sampling is seeded per TrajectoryKey, so the same request gives the same actions in any
process and any order: what lets the ROS pipeline be checked tensor-for-tensor against an
in-process run. Weights load with ``weights_only=True`` (safe for untrusted files).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..params.defaults import POLICY
from .nets import CONV_FEATURES, conv_trunk, seeded
from .normalize import StateNormalizer

MIN_STD, NORM_CLIP = 1e-4, 10.0   # PPO's running statistics: any spread counts, clipped at 10 std


class ActorCritic(nn.Module):
    def __init__(self, state_dim: int, action_dim: int, chunk: int, hidden: int = POLICY.hidden,
                 use_images: bool = POLICY.use_images, image_size: int = POLICY.image_size,
                 init_log_std: float = -1.0, seed: int = POLICY.seed):
        super().__init__()
        with seeded(seed):  # the same initial weights in every process, the global RNG untouched
            self.state_dim, self.action_dim, self.chunk, self.use_images = state_dim, action_dim, chunk, use_images
            feat = state_dim
            if use_images:
                self.cnn = nn.Sequential(*conv_trunk())
                feat += CONV_FEATURES
            # separate actor and critic MLPs over the same inputs (as PPO for continuous control does):
            # through a shared trunk the value loss, whose scale is the return's, swamps the policy's
            self.actor = nn.Sequential(nn.Linear(feat, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
            self.critic = nn.Sequential(nn.Linear(feat, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
            self.mean = nn.Linear(hidden, chunk * action_dim)
            self.value = nn.Linear(hidden, 1)
            self.log_std = nn.Parameter(torch.full((chunk * action_dim,), init_log_std))
            # running mean/variance of the states the learner trained on (buffers: they travel with the
            # weights, so the policy node normalizes exactly as the update did); identity until then
            self.norm = StateNormalizer(state_dim, MIN_STD, NORM_CLIP)
            # orthogonal init (gain sqrt 2 in the MLPs, 0.01 on the action head, 1 on the value head), as
            # PPO implementations do: the initial policy's mean action is ~0, so an untrained policy
            # does not drift the arm to a workspace bound before it learned anything
            for net, gain in ((self.actor, 2 ** 0.5), (self.critic, 2 ** 0.5)):
                for layer in net:
                    if isinstance(layer, nn.Linear):
                        nn.init.orthogonal_(layer.weight, gain)
                        nn.init.zeros_(layer.bias)
            for layer, gain in ((self.mean, 0.01), (self.value, 1.0)):
                nn.init.orthogonal_(layer.weight, gain)
                nn.init.zeros_(layer.bias)
            self._register_load_state_dict_pre_hook(_renamed_actor)

    @property
    def device(self) -> torch.device:
        return self.value.weight.device

    def inputs(self, obs: dict) -> torch.Tensor:
        """States, and the image features when the model sees the camera."""
        x = obs['states'].to(self.device, torch.float32)
        x = self.norm(x)
        if self.use_images:
            img = obs['main_images'].to(self.device).permute(0, 3, 1, 2).to(torch.float32) / 255.0
            x = torch.cat([x, self.cnn(img)], dim=1)
        return x

    @torch.no_grad()
    def merge_obs_stats(self, count: float, mean: torch.Tensor, var: torch.Tensor) -> None:
        """Fold a batch's state moments into the running ones (Chan et al.'s parallel update)."""
        self.norm.merge(count, mean, var)

    def dist(self, x: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(torch.tanh(self.mean(self.actor(x))), self.log_std.exp())

    def _value(self, x: torch.Tensor) -> torch.Tensor:
        return self.value(self.critic(x))

    @torch.no_grad()
    def act(self, obs: dict, generator: Optional[torch.Generator] = None,
            actions: Optional[torch.Tensor] = None,
            deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(actions [B, C*A] in [-1, 1], per-dim logprobs [B, C*A], values [B, 1]).

        Given ``actions`` (an expert's), returns their logprobs under the policy instead;
        ``deterministic``: the distribution's mean (evaluation).
        """
        x = self.inputs(obs)
        d = self.dist(x)
        if actions is None and deterministic:
            actions = d.mean.clamp(-1.0, 1.0)
        elif actions is None:  # noise drawn on the CPU: the same actions on any device
            noise = torch.randn(d.mean.shape, generator=generator).to(self.device)
            actions = (d.mean + d.stddev * noise).clamp(-1.0, 1.0)
        else:
            actions = actions.to(self.device)
        return actions.cpu(), d.log_prob(actions).cpu(), self._value(x).cpu()

    def evaluate(self, obs: dict, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Differentiable (logprobs [N, C*A], entropy [N, C*A], values [N]) of given actions:
        what the PPO update needs (learning/ppo.py)."""
        x = self.inputs(obs)
        d = self.dist(x)
        return d.log_prob(actions.to(self.device)), d.entropy(), self._value(x)[..., 0]

    # -- policies.protocol.TrainablePolicy: what behaviour cloning uses --------------------------
    def action_mean(self, obs: dict) -> torch.Tensor:
        return torch.tanh(self.mean(self.actor(self.inputs(obs))))

    def actor_parameters(self):
        yield from self.actor.parameters()
        yield from self.mean.parameters()
        if self.use_images:
            yield from self.cnn.parameters()

    def action_std(self) -> torch.Tensor:
        return self.log_std.detach().exp()

    @torch.no_grad()
    def set_action_std(self, std: torch.Tensor) -> None:
        self.log_std.copy_(std.log())

    @torch.no_grad()
    def values(self, obs: dict) -> torch.Tensor:
        return self._value(self.inputs(obs)).cpu()

    def load_weights(self, path: str) -> None:
        self.load_state_dict(torch.load(path, map_location='cpu', weights_only=True))


def _renamed_actor(state_dict, prefix, *_):
    """Weights saved before the actor MLP was named ``actor`` (it was ``trunk``), or before the
    normalizer was a module (``obs_mean``, ``obs_var``, ``obs_count``), still load."""
    for key in [k for k in state_dict if k.startswith(prefix + 'trunk.')]:
        state_dict[prefix + 'actor.' + key[len(prefix) + len('trunk.'):]] = state_dict.pop(key)
    for old, new in (('obs_mean', 'norm.mean'), ('obs_var', 'norm.var'), ('obs_count', 'norm.count')):
        if prefix + old in state_dict:
            state_dict[prefix + new] = state_dict.pop(prefix + old)
