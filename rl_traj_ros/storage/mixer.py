"""Batches drawn from two buffers at a fixed ratio: RLPD's symmetric sampling.

Each batch takes ``round(n * online_ratio)`` rows from the online buffer and the rest from the
demonstration buffer (0.5: RLPD's and HIL-SERL's 50/50; RLinf's ``sample(B//2)`` from each).
Rows are whole stored rows (``storage.layout``), so both buffers must hold the fields the
learner reads; a field one of them lacks is left out of the batch (a demo has no ``versions``
of a model, an online row no recorded task). Before a buffer has anything the other fills the
whole batch.
"""
from __future__ import annotations

import torch


class DemoOnlineMixer:
    def __init__(self, online, demos, online_ratio: float):
        if not 0.0 <= online_ratio <= 1.0:
            raise ValueError(f'online_ratio must be in [0, 1], got {online_ratio}')
        self.online, self.demos, self.online_ratio = online, demos, online_ratio

    def split(self, n: int) -> tuple[int, int]:
        """(online rows, demo rows) of a batch of ``n``."""
        if not len(self.demos):
            return n, 0
        if not len(self.online):
            return 0, n
        k = int(round(n * self.online_ratio))
        return k, n - k

    def sample(self, n: int, with_index: bool = False) -> dict[str, torch.Tensor]:
        """A batch, online rows first; ``with_index``: each row's ``index/seq``, ``index/row``,
        ``index/weight`` in its buffer and ``index/source`` (0 online, 1 demonstrations)."""
        k, m = self.split(n)
        parts = []
        for source, (b, c) in enumerate(((self.online, k), (self.demos, m))):
            if c:
                part = b.sample(c, with_index=with_index)
                if with_index:
                    part['index/source'] = torch.full((c,), source)
                parts.append(part)
        keys = set(parts[0]).intersection(*parts[1:])
        return {f: torch.cat([p[f] for p in parts]) for f in sorted(keys)}


__all__ = ['DemoOnlineMixer']
