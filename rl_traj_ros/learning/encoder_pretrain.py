"""Self-supervised pretraining of the keypoint encoder (``policies.keypoints``), ROS-free.

Before RL, on the demonstrations' (and the first rollouts') camera frames: the encoder's
keypoints must reconstruct each camera's image at half resolution, minus the frames' mean
image, through a linear decoder (a deep spatial autoencoder). Without the mean the loss is the
static table and background; with it, what differs between frames (the arm, the cube in its
randomized place) is all there is to reconstruct, so the keypoints track those. Nothing is
labelled and nothing is downloaded. The decoder is thrown away; the encoder is frozen afterwards.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ..params.defaults import RLPD
from ..policies.keypoints import KeypointEncoder
from ..policies.nets import seeded


@dataclass
class PretrainResult:
    frames: int
    epochs: int
    seconds: float
    first_loss: float
    last_loss: float


def pretrain_keypoints(encoder: KeypointEncoder, views: torch.Tensor, epochs: int, pretrain_batch_size: int = 64,
                       pretrain_lr: float = 1e-3, seed: int = RLPD.seed,
                       max_seconds: float = float('inf')) -> PretrainResult:
    """Train ``encoder`` on ``views`` [M, V, H, W, 3] uint8 (one row per frame, every camera) for
    ``epochs`` passes (or ``max_seconds``), then freeze it."""
    if views.ndim != 5 or views.shape[1] != encoder.cameras or views.shape[0] == 0:
        raise ValueError(f'pretraining needs frames [M, {encoder.cameras}, H, W, 3] from the demonstrations, got '
                         f'{tuple(views.shape)}')
    _, v, h, w, _ = views.shape
    target_hw = (h // 2, w // 2)

    def half(x: torch.Tensor) -> torch.Tensor:   # [n, V, H, W, 3] uint8 -> [n, V, 3 * H/2 * W/2]
        return F.avg_pool2d(x.to(torch.float32).div(255.0).permute(0, 1, 4, 2, 3).reshape(-1, 3, h, w), 2) \
            .reshape(x.shape[0], v, -1)
    mean = torch.stack([half(views[i:i + 256]).sum(0) for i in range(0, views.shape[0], 256)]).sum(0) / views.shape[0]
    with seeded(seed + 2):
        decoders = nn.ModuleList(nn.Linear(2 * encoder.keypoints, 3 * target_hw[0] * target_hw[1])
                                 for _ in range(v))
    encoder.requires_grad_(True)
    opt = torch.optim.Adam([*encoder.parameters(), *decoders.parameters()], lr=pretrain_lr)
    g = torch.Generator().manual_seed(seed)
    t0, losses, done_epochs = time.monotonic(), [], 0
    for _ in range(epochs):
        order = torch.randperm(views.shape[0], generator=g)
        for i in range(0, len(order), pretrain_batch_size):
            x = views[order[i:i + pretrain_batch_size]]
            target = half(x) - mean
            keypoints = encoder.per_camera(x)
            loss = sum(F.mse_loss(dec(k), target[:, j]) for j, (dec, k) in enumerate(zip(decoders, keypoints))) / v
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        done_epochs += 1
        if time.monotonic() - t0 > max_seconds:
            break
    encoder.freeze()
    per_epoch = max(1, -(-views.shape[0] // pretrain_batch_size))
    return PretrainResult(views.shape[0], done_epochs, time.monotonic() - t0,
                          sum(losses[:per_epoch]) / len(losses[:per_epoch]),
                          sum(losses[-per_epoch:]) / len(losses[-per_epoch:]))


__all__ = ['PretrainResult', 'pretrain_keypoints']
