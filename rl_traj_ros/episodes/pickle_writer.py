"""Pickle export: one file per episode with the raw buffer (spec: trusted, custom offline use).

Trust model: these files are pickles; read them only if you trust who wrote them.
"""
from __future__ import annotations

import pickle
from pathlib import Path

from ..storage.files import atomic_write
from .record import EpisodeRecord


class PickleWriter:
    def __init__(self, save_dir: str, rank: int = 0):
        self.dir = Path(save_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rank = rank
        self.episodes_written = 0

    def filename(self, ep: EpisodeRecord) -> Path:
        tag = 'success' if ep.success else 'fail'
        return self.dir / f'rank_{self.rank}_env_{ep.env_idx}_episode_{ep.episode_id}_{tag}.pkl'

    def write(self, ep: EpisodeRecord) -> Path:
        path = self.filename(ep)
        atomic_write(path, lambda f: pickle.dump(ep.as_dict(self.rank), f, protocol=pickle.HIGHEST_PROTOCOL))
        self.episodes_written += 1
        return path

    def finalize(self) -> None:
        """Every episode file is complete when written; nothing to consolidate."""

    def close(self) -> None:
        self.finalize()
