"""A frozen visual encoder for learning from pixels on a CPU: spatial-softmax keypoints.

Deep spatial autoencoders (Finn et al., 2016): a few conv layers make ``K`` feature maps per
camera, a spatial softmax turns each map into the expected image coordinates of its activation,
so an image becomes ``2K`` numbers in [-1, 1] that move with what moves in it (the cube, the
fingers). Trained before RL, self-supervised (``learning.encoder_pretrain``: reconstruct the
image from the keypoints, no labels, nothing downloaded), then frozen: features are computed
once per frame (in the policy node for acting; once per stored row in the learner, which trains
its MLPs on the cached features instead of re-encoding every batch), and one encoder serves the
actor and every critic. Its weights travel inside the actor's state dict, so a fresh policy node
given a snapshot acts exactly as the learner's actor did.
"""
from __future__ import annotations

import torch
from torch import nn

KEYPOINTS = 16  # K per camera


def camera_views(obs: dict) -> torch.Tensor:
    """Every camera of an observation as [N, V, H, W, 3] uint8: ``main_images`` first, then
    ``extra_view_images`` (the env's ``camera_names`` order)."""
    views = [obs['main_images'].unsqueeze(1)]
    if 'extra_view_images' in obs:
        views.append(obs['extra_view_images'])
    return torch.cat(views, 1) if len(views) > 1 else views[0]


class SpatialSoftmax(nn.Module):
    """[N, K, H, W] feature maps -> [N, 2K] expected (x, y) per map, in [-1, 1]."""

    def __init__(self, channels: int):
        super().__init__()
        self.temperature = nn.Parameter(torch.ones(1))
        self.channels = channels

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        n, k, h, w = maps.shape
        attention = torch.softmax(maps.reshape(n, k, h * w) / self.temperature, -1)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h, device=maps.device),
                                torch.linspace(-1, 1, w, device=maps.device), indexing='ij')
        return torch.cat([attention @ xs.reshape(-1, 1), attention @ ys.reshape(-1, 1)], -1).reshape(n, 2 * k)


class KeypointEncoder(nn.Module):
    """One conv stack per camera (their views differ: front and wrist) -> ``2 * KEYPOINTS``
    features per camera, concatenated: [N, V, H, W, 3] uint8 -> [N, V * 2K]. ``frozen`` is a
    buffer, so a snapshot says whether its encoder was pretrained."""

    def __init__(self, cameras: int, keypoints: int = KEYPOINTS):
        super().__init__()
        self.cameras, self.keypoints = cameras, keypoints
        self.stacks = nn.ModuleList(nn.Sequential(
            nn.Conv2d(3, 32, 5, 2, 2), nn.ReLU(), nn.Conv2d(32, 32, 3, 1, 1), nn.ReLU(),
            nn.Conv2d(32, keypoints, 3, 1, 1), SpatialSoftmax(keypoints)) for _ in range(cameras))
        self.register_buffer('frozen', torch.zeros((), dtype=torch.bool))

    @property
    def out_features(self) -> int:
        return self.cameras * 2 * self.keypoints

    def per_camera(self, views: torch.Tensor) -> list[torch.Tensor]:
        if views.shape[1] != self.cameras:
            raise ValueError(f'the keypoint encoder was built for {self.cameras} cameras, the observation has '
                             f'{views.shape[1]} (main_images + extra_view_images)')
        x = views.to(torch.float32).div(255.0).permute(0, 1, 4, 2, 3)   # [N, V, 3, H, W]
        return [stack(x[:, v]) for v, stack in enumerate(self.stacks)]

    def forward(self, views: torch.Tensor) -> torch.Tensor:
        return torch.cat(self.per_camera(views), 1)

    @torch.no_grad()
    def encode(self, views: torch.Tensor, batch: int = 512) -> torch.Tensor:
        """Features of many frames without gradients, in slices that bound the memory."""
        return torch.cat([self(views[i:i + batch]) for i in range(0, views.shape[0], batch)]) \
            if views.shape[0] else torch.zeros(0, self.out_features)

    def freeze(self) -> None:
        self.requires_grad_(False)
        self.frozen.fill_(True)


__all__ = ['KEYPOINTS', 'KeypointEncoder', 'SpatialSoftmax', 'camera_views']
