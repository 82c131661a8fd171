"""Samplers: which rows of a buffer's window a batch takes (``sampler.sample(window, n)``).

Composed like torchrl's replay buffers: the sampler decides *which* rows and with what
importance weight, the buffer gathers them (``buffer.get(which, rows)``), so another sampling
rule (prioritized, recency weighted, a per-source mix) is a new sampler, not an edit of the
buffer. The buffer tells its sampler of every trajectory it adds (``added``), and a draw names
each row by its trajectory's ``seq`` too, so priorities stay attached to rows while the window
moves.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence

import torch

from ..params.defaults import WRITER


class WindowEntry(Protocol):
    """What a sampler may read of a window entry (``storage.index.TrajectoryEntry``)."""

    seq: int
    num_samples: int


class Draw(NamedTuple):
    which: torch.Tensor    # [n] position of each row's trajectory in the window
    rows: torch.Tensor     # [n] row inside that trajectory
    seqs: torch.Tensor     # [n] that trajectory's seq (stable while the window moves)
    weights: torch.Tensor  # [n] importance weight (1 for a uniform draw)


class Sampler(Protocol):
    def added(self, entry: WindowEntry) -> None:
        """A trajectory joined the buffer."""

    def sample(self, window: Sequence[WindowEntry], num: int) -> Draw:
        """``num`` rows of ``window``."""


def locate(idx: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Global sample indices -> (trajectory position, row inside it), vectorised."""
    ends = torch.cumsum(sizes, 0)
    which = torch.bucketize(idx, ends, right=True)
    return which, idx - (ends - sizes)[which]


def _check(window: Sequence[WindowEntry]) -> None:
    if not window:
        raise RuntimeError('cannot sample from an empty replay buffer')


class UniformSampler:
    """Every row of the window equally likely, with replacement (spec §6: the default)."""

    def __init__(self, seed: int = WRITER.seed):
        self.generator = torch.Generator().manual_seed(seed)

    def added(self, entry: WindowEntry) -> None:
        pass

    def sample(self, window: Sequence[WindowEntry], num: int) -> Draw:
        _check(window)
        sizes = torch.tensor([e.num_samples for e in window])
        which, rows = locate(torch.randint(int(sizes.sum()), (num,), generator=self.generator), sizes)
        seqs = torch.tensor([e.seq for e in window])[which]
        return Draw(which, rows, seqs, torch.ones(num))


class PrioritizedSampler:
    """Proportional prioritized replay (Schaul et al. 2016): row i is drawn with probability
    p_i^alpha / sum p^alpha, and weighted by (N P(i))^-beta / max (the bias correction the
    learner multiplies into its loss). New rows get the highest priority seen, so each is
    drawn soon at least once; ``update_priority`` sets rows' priorities from the learner's
    errors (|TD error| + ``eps``)."""

    def __init__(self, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-3, seed: int = WRITER.seed):
        if alpha < 0 or not 0 <= beta <= 1 or eps <= 0:
            raise ValueError(f'alpha >= 0, beta in [0, 1] and eps > 0, got {alpha}, {beta}, {eps}')
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.generator = torch.Generator().manual_seed(seed)
        self.priorities: dict[int, torch.Tensor] = {}  # seq -> [num_samples]
        self.max_priority = 1.0

    def added(self, entry: WindowEntry) -> None:
        self.priorities[entry.seq] = torch.full((entry.num_samples,), self.max_priority)

    def sample(self, window: Sequence[WindowEntry], num: int) -> Draw:
        _check(window)
        for e in window:  # a buffer re-opened from disk: its trajectories were never announced
            if e.seq not in self.priorities:
                self.added(e)
        live = {e.seq for e in window}
        for seq in [s for s in self.priorities if s not in live]:  # left the window: forget
            del self.priorities[seq]
        p = torch.cat([self.priorities[e.seq] for e in window]) ** self.alpha
        probs = p / p.sum()
        idx = torch.multinomial(probs, num, replacement=True, generator=self.generator)
        sizes = torch.tensor([e.num_samples for e in window])
        which, rows = locate(idx, sizes)
        w = (len(probs) * probs[idx]) ** -self.beta
        return Draw(which, rows, torch.tensor([e.seq for e in window])[which], w / w.max())

    def update_priority(self, seqs: torch.Tensor, rows: torch.Tensor, priorities: torch.Tensor) -> None:
        """Rows (by trajectory seq and row) get ``|priorities| + eps``; rows no longer in the
        buffer are skipped."""
        pr = priorities.detach().abs().reshape(-1).to(torch.float32).cpu() + self.eps
        for s, r, v in zip(seqs.tolist(), rows.tolist(), pr.tolist()):
            if s in self.priorities:
                self.priorities[s][r] = v
        self.max_priority = max(self.max_priority, float(pr.max())) if len(pr) else self.max_priority


__all__ = ['Draw', 'Sampler', 'UniformSampler', 'PrioritizedSampler', 'locate']
