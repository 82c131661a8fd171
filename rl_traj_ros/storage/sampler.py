"""Samplers: which rows of a buffer's window a batch takes (``sampler.sample(window, n)``).

Composed like torchrl's replay buffers: the sampler decides *which* rows, the buffer gathers
them (``buffer.get(positions, rows)``), so another sampling rule (prioritized, recency
weighted, a per-source mix) is a new sampler, not an edit of the buffer.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import torch


class WindowEntry(Protocol):
    """What a sampler may read of a window entry (``storage.index.TrajectoryEntry``)."""

    seq: int
    num_samples: int


class Sampler(Protocol):
    def sample(self, window: Sequence[WindowEntry], num: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``num`` rows as (position in ``window``, row inside that trajectory)."""


def locate(idx: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Global sample indices -> (trajectory position, row inside it), vectorised."""
    ends = torch.cumsum(sizes, 0)
    which = torch.bucketize(idx, ends, right=True)
    return which, idx - (ends - sizes)[which]


class UniformSampler:
    """Every row of the window equally likely, with replacement (spec §6: the default)."""

    def __init__(self, seed: int = 1234):
        self.generator = torch.Generator().manual_seed(seed)

    def sample(self, window: Sequence[WindowEntry], num: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not window:
            raise RuntimeError('cannot sample from an empty replay buffer')
        sizes = torch.tensor([e.num_samples for e in window])
        idx = torch.randint(int(sizes.sum()), (num,), generator=self.generator)
        return locate(idx, sizes)


__all__ = ['Sampler', 'UniformSampler', 'locate']
