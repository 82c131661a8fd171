"""Feature statistics the way lerobot computes and aggregates them (compute_stats.py).

Computed from the arrays being written, never by re-reading the encoded files: numeric
features reduce over frames (population std, quantiles), images per channel in [0, 1] over
evenly spaced sample frames; episodes aggregate count-weighted with pooled variance.
"""
from __future__ import annotations

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QNAMES = ('q01', 'q10', 'q50', 'q90', 'q99')


def _sample_indices(n: int) -> np.ndarray:
    if n <= 100:
        return np.arange(n)
    k = int(max(100, min(n ** 0.75, 10000)))
    return np.round(np.linspace(0, n - 1, k)).astype(int)


def numeric_stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """x: [T, ...] -> stats over axis 0 (bools as 0/1)."""
    x = np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1)
    out = {'min': x.min(0), 'max': x.max(0), 'mean': x.mean(0), 'std': x.std(0),
           'count': np.array([x.shape[0]], dtype=np.int64)}
    if x.shape[0] < 2:
        for q in QNAMES:
            out[q] = out['mean'].copy()
    else:
        qs = np.quantile(x, QUANTILES, axis=0)
        for name, v in zip(QNAMES, qs):
            out[name] = v
    return out


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """frames: [T, H, W, C] uint8 -> per-channel stats of shape (C, 1, 1) in [0, 1].

    uint8 pixels have 256 possible values, so a per-channel histogram (one bincount) gives
    min, max, mean, std and the exact linear-interpolated quantiles without sorting millions
    of floats.
    """
    sel = frames[_sample_indices(frames.shape[0])]
    h, w = sel.shape[1:3]
    step = max(1, int(round(max(h, w) / 150))) if max(h, w) >= 300 else 1
    sel = np.ascontiguousarray(sel[:, ::step, ::step])
    c = sel.shape[-1]
    flat = sel.reshape(-1, c)
    values = np.arange(256, dtype=np.float64)
    out: dict[str, list] = {k: [] for k in ('min', 'max', 'mean', 'std') + QNAMES}
    for ch in range(c):
        counts = np.bincount(flat[:, ch], minlength=256).astype(np.float64)
        n = counts.sum()
        nz = np.nonzero(counts)[0]
        mean = (values * counts).sum() / n
        out['min'].append(nz[0])
        out['max'].append(nz[-1])
        out['mean'].append(mean)
        out['std'].append(np.sqrt(max(((values - mean) ** 2 * counts).sum() / n, 0.0)))
        cdf = np.cumsum(counts)
        for name, q in zip(QNAMES, QUANTILES):
            pos = q * (n - 1)
            lo, hi = np.floor(pos), np.ceil(pos)
            v_lo = np.searchsorted(cdf, lo, side='right')
            v_hi = np.searchsorted(cdf, hi, side='right')
            out[name].append(v_lo + (v_hi - v_lo) * (pos - lo))
    res = {k: (np.asarray(v, dtype=np.float64) / 255.0).reshape(-1, 1, 1) for k, v in out.items()}
    res['count'] = np.array([sel.shape[0]], dtype=np.int64)
    return res


def aggregate(stats: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    counts = np.array([s['count'][0] for s in stats], dtype=np.float64)
    total = counts.sum()
    shape = stats[0]['mean'].shape
    w = counts.reshape((-1,) + (1,) * len(shape)) / total
    means = np.stack([s['mean'] for s in stats])
    mean = (w * means).sum(0)
    var = (w * (np.stack([s['std'] for s in stats]) ** 2 + (means - mean) ** 2)).sum(0)
    out = {'min': np.min(np.stack([s['min'] for s in stats]), 0), 'max': np.max(np.stack([s['max'] for s in stats]), 0),
           'mean': mean, 'std': np.sqrt(var), 'count': np.array([int(total)], dtype=np.int64)}
    for q in QNAMES:
        out[q] = (w * np.stack([s[q] for s in stats])).sum(0)
    return out


def to_json(stats: dict[str, np.ndarray]) -> dict[str, list]:
    return {k: np.asarray(v).tolist() for k, v in stats.items()}
