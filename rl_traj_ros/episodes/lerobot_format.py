"""The LeRobot dataset format as this package writes it: keys, namings, paths, frame encoding.

What ``lerobot_writer`` (the writer) and ``lerobot_meta`` (the meta files) share, and what the
pipelines check before a run (``holds_dataset``). See shared/research/lerobot-format.md for
the contract lerobot 0.6.1 checks.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from PIL import Image


MAIN_IMAGE_KEYS = ('main_images', 'image', 'full_image')
EXTRA_IMAGE_KEYS = ('extra_view_images', 'extra_view_image')
STATE_KEYS = ('states', 'state')
TASK_KEYS = ('task_descriptions', 'task_description', 'task')
DEFAULT_FEATURES = {'timestamp': ('float32', [1]), 'frame_index': ('int64', [1]), 'episode_index': ('int64', [1]),
                    'index': ('int64', [1]), 'task_index': ('int64', [1])}
CHUNKS_SIZE = 1000
DATA_FILES_SIZE_MB = 100   # v3.0: episodes are appended to one data file up to this size (lerobot's default)
VIDEO_FILES_SIZE_MB = 200  # info.json's video_files_size_in_mb (lerobot's default)
VIDEO_PATH = 'videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4'
@dataclass(frozen=True)
class DatasetNaming:
    """Which feature key each recorded quantity gets."""
    state: str
    action: str
    reward: Optional[str]
    done: str
    success: str
    camera_prefix: Optional[str]  # None: the spec's image / extra_view_image[-i] keys
    intervention: Optional[str] = None  # per frame: the operator's action was executed (HIL-SERL's key)
    reward_source: Optional[str] = None  # per frame: 0 the env, 1 the success classifier, 2 the operator

    def camera_keys(self, streams: list[tuple[str, Optional[int]]], names: Sequence[str]) -> list[str]:
        """streams: ('main', None) | ('extra', None | i) in dataset order."""
        if self.camera_prefix is None:
            return ['image' if src == 'main' else ('extra_view_image' if i is None else f'extra_view_image-{i}')
                    for src, i in streams]
        if not names:  # unnamed cameras: the spec's roles
            names = ['main'] + [f'extra_{j}' for j in range(len(streams) - 1)]
        if len(names) < len(streams):
            raise ValueError(f'the env has {len(streams)} camera streams but camera_names names {len(names)}: '
                             f'{list(names)} (one name per stream, the main camera first)')
        keys = [f'{self.camera_prefix}{n}' for n in names[:len(streams)]]
        if len(set(keys)) != len(keys) or any('/' in n or not n for n in names[:len(streams)]):
            raise ValueError(f'camera_names must be distinct, non-empty and without "/": {list(names)}')
        return keys


NAMINGS = {
    'lerobot': DatasetNaming('observation.state', 'action', 'next.reward', 'next.done', 'next.success',
                             'observation.images.', 'complementary_info.is_intervention',
                             'complementary_info.reward_source'),
    'rlinf': DatasetNaming('state', 'actions', None, 'done', 'is_success', None),
}
IMAGE_STORAGES = ('png', 'video')
def _first(obs: dict, keys: tuple) -> Any:
    for k in keys:
        if k in obs and obs[k] is not None:
            return obs[k]
    return None


def _np(x: Any) -> np.ndarray:
    if hasattr(x, 'detach'):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def to_uint8_image(x: Any) -> np.ndarray:
    """Float images in [0, 1] are scaled by 255; other dtypes are clipped to [0, 255]."""
    a = _np(x)
    if a.dtype == np.uint8:
        return a
    if np.issubdtype(a.dtype, np.floating):
        return (np.clip(a, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    return np.clip(a, 0, 255).astype(np.uint8)


def png_bytes(frame: np.ndarray, compress_level: int = 1) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format='PNG', compress_level=compress_level)
    return buf.getvalue()


def holds_dataset(root: str | Path) -> bool:
    """A LeRobot dataset is there: its meta/info.json exists from the first finalize checkpoint on."""
    return (Path(root) / 'meta' / 'info.json').exists()
