"""Demonstrations for a warm start: recorded LeRobot episodes -> (state, action chunk) pairs.

Why from the datasets: the collection pipeline already records the expert's (or an operator's)
successful episodes as LeRobot datasets (the main job's ``collected_data/``); behaviour cloning
the actor on them gives PPO a policy that sometimes succeeds on a sparse-reward task
(pick-and-lift), where a policy from scratch sees no reward at all. Either naming the package
writes is read (``observation.state``/``action`` or the spec's ``state``/``actions``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .lerobot_format import NAMINGS


def find_datasets(root: str | Path) -> list[Path]:
    """``root`` itself if it is a LeRobot dataset, else every dataset below it (sorted)."""
    root = Path(root)
    if (root / 'meta' / 'info.json').exists():
        return [root]
    return sorted(p.parent.parent for p in root.rglob('meta/info.json'))


def read_episodes(root: str | Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(states [T, S], actions [T, A]) of every episode of every dataset under ``root``."""
    import pyarrow.parquet as pq
    datasets = find_datasets(root)
    if not datasets:
        raise ValueError(f'no LeRobot dataset (meta/info.json) under {root}')
    out = []
    for ds in datasets:
        for f in sorted((ds / 'data').rglob('*.parquet')):
            names = pq.read_schema(f).names
            naming = next((n for n in NAMINGS.values() if n.state in names and n.action in names), None)
            if naming is None:
                raise ValueError(f'{f} has no state/action columns of a known naming: {names}')
            t = pq.read_table(f, columns=[naming.state, naming.action, 'episode_index'])
            states = np.asarray(t.column(naming.state).to_pylist(), np.float32)
            actions = np.asarray(t.column(naming.action).to_pylist(), np.float32)
            ep = np.asarray(t.column('episode_index').to_pylist())
            for e in np.unique(ep):
                rows = np.nonzero(ep == e)[0]
                out.append((states[rows], actions[rows]))
    return out


def demo_chunks(episodes: list[tuple[np.ndarray, np.ndarray]], chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Every frame's state with the chunk of ``chunk`` actions it starts (the episode's last
    action repeated past its end): ``(states [N, S], chunks [N, chunk * A])``."""
    xs, ys = [], []
    for states, actions in episodes:
        t = len(actions)
        idx = np.minimum(np.arange(t)[:, None] + np.arange(chunk)[None, :], t - 1)
        xs.append(states)
        ys.append(actions[idx].reshape(t, -1))
    return np.concatenate(xs), np.concatenate(ys)
