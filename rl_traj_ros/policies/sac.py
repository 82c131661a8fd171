"""Off-policy models over action chunks: a squashed-Gaussian actor and a LayerNorm critic ensemble.

The actor is what the policy node runs (``act``, the same call as ``ActorCritic``'s) and what
the learner sends as weights; the critics stay with the learner. Actions are ``tanh`` squashed
and scaled per action dimension (``action_scale``: the env's units, e.g. metres per control
step for the sim's pick task, 1 for a gripper command), so the actor, the demonstrations and
the env speak the same units. LayerNorm after every hidden layer (RLPD: it keeps an ensemble's
Q values from extrapolating on out-of-distribution actions); the critic ensemble is one
batched matmul per layer, not a Python loop over members. States are standardized per dimension
(``normalize.StateNormalizer``, fitted to the demonstrations) before either network sees them.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ..params.defaults import SAC
from .keypoints import KEYPOINTS, KeypointEncoder, camera_views
from .nets import CONV_FEATURES, conv_trunk, seeded
from .normalize import StateNormalizer

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
NORM_CLIP = 10.0
MIN_STD = 1e-2


class ImageEncoder(nn.Module):
    """A small CNN over ``main_images`` [N, H, W, 3] uint8 -> [N, out] features."""

    def __init__(self, out: int = 64):
        super().__init__()
        self.out_features = out
        self.net = nn.Sequential(*conv_trunk(), nn.Linear(CONV_FEATURES, out), nn.LayerNorm(out), nn.Tanh())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images.permute(0, 3, 1, 2).to(torch.float32) / 255.0)


IMAGE_ENCODERS = ('cnn', 'keypoints')


def make_encoder(kind: str, cameras: int) -> nn.Module:
    if kind == 'cnn':
        return ImageEncoder()
    if kind == 'keypoints':
        return KeypointEncoder(cameras)
    raise ValueError(f"image_encoder must be one of {IMAGE_ENCODERS}, got {kind!r}")


def image_features(encoder: Optional[nn.Module], obs: dict) -> torch.Tensor:
    """The features of an observation's cameras: the cached ``image_features`` when the learner
    put them there (a frozen encoder's), else the encoder over the images."""
    if 'image_features' in obs:
        return obs['image_features'].to(torch.float32)
    if encoder is None:
        raise ValueError("the critics of image_encoder 'keypoints' train on cached features: the batch has no "
                         "'image_features' (the learner computes them once per stored row)")
    if isinstance(encoder, KeypointEncoder):
        return encoder(camera_views(obs))
    return encoder(obs['main_images'])


def mlp(inp: int, hidden: int, layers: int = 2) -> nn.Sequential:
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [nn.Linear(inp if i == 0 else hidden, hidden), nn.LayerNorm(hidden), nn.ReLU()]
    return nn.Sequential(*mods)


class SquashedGaussianActor(nn.Module):
    def __init__(self, state_dim: int, action_dim: int, chunk: int, hidden: int = SAC.hidden,
                 action_scale: Optional[Sequence[float]] = None, use_images: bool = SAC.use_images,
                 seed: int = SAC.seed, image_encoder: str = SAC.image_encoder, cameras: int = 1):
        super().__init__()
        with seeded(seed):  # the same initial weights in every process, the global RNG untouched
            self.state_dim, self.action_dim, self.chunk, self.use_images = state_dim, action_dim, chunk, use_images
            scale = torch.ones(action_dim) if action_scale is None else torch.as_tensor(action_scale, dtype=torch.float32)
            if scale.shape != (action_dim,) or bool((scale <= 0).any()):
                raise ValueError(f'action_scale must be {action_dim} positive numbers, got {scale.tolist()}')
            self.register_buffer('scale', scale.repeat(chunk))
            self.norm = StateNormalizer(state_dim, MIN_STD, NORM_CLIP)
            self.encoder = make_encoder(image_encoder, cameras) if use_images else None
            self.body = mlp(state_dim + (self.encoder.out_features if use_images else 0), hidden)
            self.mean = nn.Linear(hidden, chunk * action_dim)
            self.log_std = nn.Linear(hidden, chunk * action_dim)

    @property
    def device(self) -> torch.device:
        return self.mean.weight.device

    def features(self, obs: dict) -> torch.Tensor:
        x = self.norm(obs['states'].to(self.device))
        if self.use_images:
            x = torch.cat([x, image_features(self.encoder, {k: v.to(self.device) for k, v in obs.items()
                                                               if isinstance(v, torch.Tensor)})], dim=1)
        return x

    def _dist(self, obs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(self.features(obs))
        log_std = self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return self.mean(h), log_std.exp()

    def sample(self, obs: dict, generator: Optional[torch.Generator] = None,
               deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions [N, C*A] in ``[-scale, scale]``, log-probability [N]) with the tanh
        correction; differentiable (reparameterized). The log-probability is the normalized
        action's (in [-1, 1] before the scale): the scale is a constant shift of it, and leaving it
        out keeps an entropy target such as ``-|A|/2`` meaningful whatever the env's units."""
        mu, std = self._dist(obs)
        if deterministic:
            u = mu
        else:
            noise = torch.randn(mu.shape, generator=generator).to(mu.device) if generator is not None \
                else torch.randn_like(mu)
            u = mu + std * noise
        t = torch.tanh(u)
        logp = (-0.5 * ((u - mu) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2.0) - u - F.softplus(-2 * u))).sum(-1)
        return t * self.scale, logp

    @torch.no_grad()
    def act(self, obs: dict, generator: Optional[torch.Generator] = None, actions: Optional[torch.Tensor] = None,
            deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The policy node's call (as ``ActorCritic.act``): (actions [B, C*A], log-probabilities
        [B, C*A] (the chunk's, spread evenly over its entries), values [B, 1] (zeros: the
        critics stay with the learner)). Given ``actions`` (an operator's), the same shapes."""
        a, logp = self.sample(obs, generator, deterministic)
        if actions is not None:
            a = actions.to(self.device)
        n = a.shape[0]
        return a.cpu(), (logp / a.shape[1]).unsqueeze(1).expand(n, a.shape[1]).cpu(), torch.zeros(n, 1)

    @torch.no_grad()
    def values(self, obs: dict) -> torch.Tensor:
        """Terminal values the policy node is asked for: zeros (an off-policy learner bootstraps
        from its own critics, not from values stored with the data)."""
        return torch.zeros(obs['states'].shape[0], 1)

    def load_weights(self, path: str) -> None:
        self.load_state_dict(torch.load(path, map_location='cpu', weights_only=True))


def action_scale(values, action_dim: int) -> list[float]:
    """A ``sac_action_scale`` parameter: one value for every dimension, or one per dimension."""
    values = [float(v) for v in values]
    if len(values) == 1:
        return values * action_dim
    if len(values) != action_dim:
        raise ValueError(f'sac_action_scale has {len(values)} values; give 1 or action_dim = {action_dim}')
    return values


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied as one batched matmul: [E, N, in] -> [E, N, out]."""

    def __init__(self, members: int, inp: int, out: int):
        super().__init__()
        bound = 1.0 / math.sqrt(inp)
        self.weight = nn.Parameter(torch.empty(members, inp, out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class CriticEnsemble(nn.Module):
    """``E`` Q-functions Q(s, a) over action chunks, LayerNorm after each hidden layer."""

    def __init__(self, state_dim: int, action_dim: int, chunk: int, members: int = 10, hidden: int = SAC.hidden,
                 use_images: bool = SAC.use_images, seed: int = SAC.seed, image_encoder: str = SAC.image_encoder,
                 cameras: int = 1):
        """One image encoder for all ``members`` (not one per critic); with 'keypoints' none at all:
        the critics read the actor's frozen encoder's features, cached with the rows."""
        super().__init__()
        with seeded(seed + 1):  # not the actor's stream: its first layer would equal the actor's
            self.members, self.use_images = members, use_images
            self.norm = StateNormalizer(state_dim, MIN_STD, NORM_CLIP)
            self.encoder = ImageEncoder() if use_images and image_encoder == 'cnn' else None
            features = (self.encoder.out_features if self.encoder is not None else cameras * 2 * KEYPOINTS) \
                if use_images else 0
            inp = state_dim + features + chunk * action_dim
            self.l1, self.l2, self.out = (EnsembleLinear(members, inp, hidden),
                                          EnsembleLinear(members, hidden, hidden), EnsembleLinear(members, hidden, 1))
            self.hidden = hidden

    def forward(self, obs: dict, actions: torch.Tensor) -> torch.Tensor:
        """Q values [E, N]."""
        x = self.norm(obs['states'])
        if self.use_images:
            x = torch.cat([x, image_features(self.encoder, obs)], dim=1)
        x = torch.cat([x, actions.to(torch.float32)], dim=1).unsqueeze(0).expand(self.members, -1, -1)
        h = F.relu(F.layer_norm(self.l1(x), (self.hidden,)))
        h = F.relu(F.layer_norm(self.l2(h), (self.hidden,)))
        return self.out(h)[..., 0]


__all__ = ['SquashedGaussianActor', 'CriticEnsemble', 'EnsembleLinear', 'IMAGE_ENCODERS', 'ImageEncoder',
           'action_scale', 'image_features', 'make_encoder']
