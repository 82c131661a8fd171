"""Reading a recorded LeRobot dataset back without lerobot (v3.0 or v2.1, pyarrow; MP4 cameras
decoded with PyAV): its cameras' frames per episode and where each episode succeeded.

What the success classifier trains on (``run train_reward``) and what ``viz.dataset_frames``
exports. Either naming: lerobot's ``next.success`` marks the step that succeeded (HIL
recorders), the spec's ``is_success`` holds the episode's outcome on every frame (its success
counts at the last frame).
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .lerobot_format import NAMINGS


def read_info(root: Path) -> dict:
    path = Path(root) / 'meta' / 'info.json'
    if not path.exists():
        raise FileNotFoundError(f'{root} is not a LeRobot dataset (no meta/info.json)')
    return json.loads(path.read_text())


def camera_keys(info: dict) -> list[str]:
    """The dataset's camera features, in its order (the main camera first)."""
    return [k for k, f in info['features'].items() if f['dtype'] in ('image', 'video')]


def video_frames(root: Path, info: dict, episodes: Optional[list[int]] = None) -> dict[tuple[str, int], np.ndarray]:
    """(camera key, episode) -> that episode's frames [T, H, W, 3] uint8, cut from the camera's MP4 files."""
    from .video import decode_frames
    keys = [k for k, f in info['features'].items() if f['dtype'] == 'video']
    if not keys:
        return {}
    rows = pa.concat_tables([pq.read_table(f) for f in sorted((root / 'meta' / 'episodes').glob('*/*.parquet'))])
    decoded: dict[Path, np.ndarray] = {}
    out = {}
    for e in rows.to_pylist():
        if episodes is not None and e['episode_index'] not in episodes:
            continue
        for k in keys:
            path = root / info['video_path'].format(video_key=k, chunk_index=e[f'videos/{k}/chunk_index'],
                                                    file_index=e[f'videos/{k}/file_index'])
            if path not in decoded:
                decoded[path] = decode_frames(path)
            first = round(e[f'videos/{k}/from_timestamp'] * info['fps'])
            out[(k, e['episode_index'])] = decoded[path][first:first + e['length']]
    return out


def png_frame(cell: dict) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(cell['bytes'])).convert('RGB'))


@dataclass
class LabeledEpisode:
    dataset: str
    index: int
    frames: dict[str, np.ndarray]   # camera key -> [T, H, W, 3] uint8
    success_at: Optional[int]       # the frame of the success label (None: not a success)

    @property
    def length(self) -> int:
        return len(next(iter(self.frames.values())))


def labeled_episodes(root: str | Path) -> list[LabeledEpisode]:
    """Every episode of the dataset at ``root`` with its camera frames and success frame."""
    root = Path(root)
    info = read_info(root)
    cams = camera_keys(info)
    if not cams:
        raise ValueError(f'{root} records no camera (image or video features): a success classifier needs them')
    feats = info['features']
    naming = next((n for n in NAMINGS.values() if n.success in feats), None)
    if naming is None:
        raise ValueError(f'{root} has no success column ({", ".join(n.success for n in NAMINGS.values())})')
    files = sorted((root / 'data').rglob('*.parquet'))
    if not files:
        raise FileNotFoundError(f'no data files under {root / "data"}')
    images = [k for k in cams if feats[k]['dtype'] == 'image']
    table = pa.concat_tables([pq.read_table(f, columns=['episode_index', 'frame_index', naming.success, *images])
                              for f in files])
    videos = video_frames(root, info)
    cols = table.to_pydict()
    order = np.lexsort((np.asarray(cols['frame_index']), np.asarray(cols['episode_index'])))
    eps = np.asarray(cols['episode_index'])[order]
    out = []
    for ep in np.unique(eps):
        rows = order[eps == ep]
        flags = np.asarray([bool(np.asarray(cols[naming.success][i]).reshape(-1)[0]) for i in rows])
        if naming.reward is None:  # the episode's outcome on every frame
            at = len(rows) - 1 if flags.any() else None
        else:
            at = int(np.argmax(flags)) if flags.any() else None
        frames = {k: (np.stack([png_frame(cols[k][i]) for i in rows]) if k in images else videos[(k, int(ep))])
                  for k in cams}
        out.append(LabeledEpisode(str(root), int(ep), frames, at))
    return out


__all__ = ['LabeledEpisode', 'camera_keys', 'labeled_episodes', 'png_frame', 'read_info', 'video_frames']
