"""Building blocks both policy families share: seeded initialisation and the camera CNN.

``seeded``: a model built from a seed has the same initial weights in every process (version 0
on the policy node equals the learner's), without reseeding the caller's global RNG.
``conv_trunk``: the one small CNN over 3-channel images (PPO's actor-critic and RLPD's image
encoder put their own heads on it; its layers keep the names their weights were saved with).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

CONV_FEATURES = 32 * 16  # conv_trunk's output per image: 32 channels pooled to 4 x 4


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def conv_trunk() -> list[nn.Module]:
    """Conv 8x8/4 -> ReLU -> conv 4x4/2 -> ReLU -> 4x4 average pool -> flatten: [N, 3, H, W] float in
    [0, 1] -> [N, CONV_FEATURES], any H, W >= 36."""
    return [nn.Conv2d(3, 16, 8, 4), nn.ReLU(), nn.Conv2d(16, 32, 4, 2), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
            nn.Flatten()]
