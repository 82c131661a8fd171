"""LeRobot dataset export with pyarrow + numpy + Pillow only (lerobot is never imported).

Two layouts: ``v3.0`` (what current lerobot reads; default) and ``v2.1`` (the spec's layout,
plus ``episodes_stats.jsonl`` so lerobot's converter accepts it). The writer is initialised
lazily from the first episode (image sizes, state and action dims), encodes PNGs on a
thread pool (Pillow releases the GIL while encoding), computes stats from the arrays it
writes, and makes every checkpoint (``finalize``) a complete, loadable dataset: data files
are written under temp names and renamed, meta files are replaced atomically.
See shared/research/lerobot-format.md for the contract lerobot 0.6.1 checks.
"""
from __future__ import annotations

import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from ..storage import atomic_write, json_writer, publish_staged, stage_write
from . import lerobot_stats as st
from .record import EpisodeRecord

MAIN_IMAGE_KEYS = ('main_images', 'image', 'full_image')
EXTRA_IMAGE_KEYS = ('extra_view_images', 'extra_view_image')
STATE_KEYS = ('states', 'state')
TASK_KEYS = ('task_descriptions', 'task_description', 'task')
DEFAULT_FEATURES = {'timestamp': ('float32', [1]), 'frame_index': ('int64', [1]), 'episode_index': ('int64', [1]),
                    'index': ('int64', [1]), 'task_index': ('int64', [1])}
CHUNKS_SIZE = 1000


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


class LeRobotWriter:
    """Writes EpisodeRecords as a LeRobot dataset under ``root``.

    ``compress_level`` trades PNG size for speed (lossless either way; lerobot uses 6).
    """

    def __init__(self, root: str, fps: int = 10, robot_type: str = 'panda', version: str = 'v3.0',
                 workers: Optional[int] = None, compress_level: int = 1, default_task: str = '',
                 truth_dir: Optional[str] = None):
        if version not in ('v3.0', 'v2.1'):
            raise ValueError(f"version must be 'v3.0' or 'v2.1', got {version!r}")
        self.root = Path(root)
        if holds_dataset(self.root):
            raise FileExistsError(f'{self.root} already holds a LeRobot dataset; choose a new directory')
        self.fps, self.robot_type, self.version = int(fps), robot_type, version
        self.compress_level = compress_level
        self.default_task = default_task
        # optional raw copy of every recorded frame, for the acceptance check against lerobot
        self.truth_dir = Path(truth_dir) if truth_dir else None
        self._pool = ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2),
                                        thread_name_prefix='lerobot-png')
        self.features: Optional[dict[str, dict]] = None
        self._image_keys: list[str] = []
        self._tasks: dict[str, int] = {}
        self._episodes: list[dict] = []
        self._ep_stats: list[dict[str, dict]] = []
        self._total_frames = 0
        self._file_index = 0
        self._writer: Optional[pq.ParquetWriter] = None
        self._writer_tmp: Optional[Path] = None
        self._schema: Optional[pa.Schema] = None
        self._staged_episodes: list[tuple[Path, Path]] = []  # v2.1 episode files awaiting finalize

    # -- lazy initialisation -----------------------------------------------------------------
    def _init_features(self, ep: EpisodeRecord) -> None:
        obs0 = ep.observations[0]
        feats: dict[str, dict] = {}
        main = _first(obs0, MAIN_IMAGE_KEYS)
        if main is not None:
            h, w, c = to_uint8_image(main).shape
            feats['image'] = {'dtype': 'image', 'shape': [h, w, c], 'names': ['height', 'width', 'channels']}
        extra = _first(obs0, EXTRA_IMAGE_KEYS)
        if extra is not None:
            e = to_uint8_image(extra)
            names = ['extra_view_image'] if e.ndim == 3 else [f'extra_view_image-{i}' for i in range(e.shape[0])]
            shape = list(e.shape[-3:])
            for n in names:
                feats[n] = {'dtype': 'image', 'shape': shape, 'names': ['height', 'width', 'channels']}
        state = _first(obs0, STATE_KEYS)
        if state is not None:
            d = int(_np(state).size)
            feats['state'] = {'dtype': 'float32', 'shape': [d], 'names': [f'state_{i}' for i in range(d)]}
        a = int(_np(ep.actions[0]).size)
        feats['actions'] = {'dtype': 'float32', 'shape': [a], 'names': [f'action_{i}' for i in range(a)]}
        feats['done'] = {'dtype': 'bool', 'shape': [1], 'names': None}
        feats['is_success'] = {'dtype': 'bool', 'shape': [1], 'names': None}
        for k, (dt, shape) in DEFAULT_FEATURES.items():
            feats[k] = {'dtype': dt, 'shape': shape, 'names': None}
        self.features = feats
        self._image_keys = [k for k, f in feats.items() if f['dtype'] == 'image']
        fields = []
        hf = {}
        for k, f in feats.items():
            if f['dtype'] == 'image':
                fields.append(pa.field(k, pa.struct([('bytes', pa.binary()), ('path', pa.string())])))
                hf[k] = {'_type': 'Image'}
            elif f['shape'] == [1]:
                fields.append(pa.field(k, pa.from_numpy_dtype(np.dtype(f['dtype']))))
                hf[k] = {'dtype': f['dtype'], '_type': 'Value'}
            else:
                fields.append(pa.field(k, pa.list_(pa.from_numpy_dtype(np.dtype(f['dtype'])), f['shape'][0])))
                hf[k] = {'feature': {'dtype': f['dtype'], '_type': 'Value'}, 'length': f['shape'][0], '_type': 'List'}
        self._schema = pa.schema(fields, metadata={'huggingface': json.dumps({'info': {'features': hf}})})

    # -- episodes ----------------------------------------------------------------------------
    def _frames(self, ep: EpisodeRecord) -> dict[str, np.ndarray]:
        """Per-feature arrays over the episode's frames (obs t, action t; the final obs is dropped)."""
        n = ep.num_steps
        obs = ep.observations[:n]
        cols: dict[str, np.ndarray] = {}
        if 'image' in self.features:
            cols['image'] = np.stack([to_uint8_image(_first(o, MAIN_IMAGE_KEYS)) for o in obs])
        extra_names = [k for k in self._image_keys if k.startswith('extra_view_image')]
        if extra_names:
            ex = np.stack([to_uint8_image(_first(o, EXTRA_IMAGE_KEYS)) for o in obs])
            if extra_names == ['extra_view_image'] and ex.ndim == 4:
                cols['extra_view_image'] = ex
            else:
                for i, name in enumerate(extra_names):
                    cols[name] = ex[:, i]
        for k in self._image_keys:
            want = tuple(self.features[k]['shape'])
            if cols[k].shape[1:] != want:
                raise ValueError(f'episode {ep.episode_id} env {ep.env_idx}: {k} frames are {cols[k].shape[1:]}, '
                                 f'the dataset was initialised with {want}')
        if 'state' in self.features:
            cols['state'] = np.stack([_np(_first(o, STATE_KEYS)).reshape(-1) for o in obs]).astype(np.float32)
        cols['actions'] = np.stack([_np(a).reshape(-1) for a in ep.actions]).astype(np.float32)
        for k in ('state', 'actions'):
            if k in cols and cols[k].shape[1] != self.features[k]['shape'][0]:
                raise ValueError(f'episode {ep.episode_id} env {ep.env_idx}: {k} has {cols[k].shape[1]} dims, '
                                 f'the dataset was initialised with {self.features[k]["shape"][0]}')
        cols['done'] = np.zeros(n, dtype=bool)
        cols['done'][-1] = True
        cols['is_success'] = np.full(n, bool(ep.success))
        return cols

    def _task(self, ep: EpisodeRecord) -> str:
        t = _first(ep.observations[0], TASK_KEYS)
        if isinstance(t, (list, tuple)):
            t = t[0] if t else None
        return str(t) if t is not None else self.default_task

    def write(self, ep: EpisodeRecord) -> None:
        if ep.num_steps == 0:
            return
        if self.features is None:
            self._init_features(ep)
            (self.root / 'meta').mkdir(parents=True, exist_ok=True)
        cols = self._frames(ep)
        n = ep.num_steps
        ep_index = len(self._episodes)
        task = self._task(ep)
        task_index = self._tasks.setdefault(task, len(self._tasks))
        start = self._total_frames
        cols['frame_index'] = np.arange(n, dtype=np.int64)
        cols['timestamp'] = (cols['frame_index'] / self.fps).astype(np.float32)
        cols['episode_index'] = np.full(n, ep_index, dtype=np.int64)
        cols['index'] = np.arange(start, start + n, dtype=np.int64)
        cols['task_index'] = np.full(n, task_index, dtype=np.int64)
        # encode every PNG of the episode in parallel while stats are computed here
        futures = {k: [self._pool.submit(png_bytes, f, self.compress_level) for f in cols[k]] for k in self._image_keys}
        stats = {k: (st.image_stats(cols[k]) if k in self._image_keys else st.numeric_stats(cols[k].reshape(n, -1)))
                 for k in self.features}
        arrays = []
        for k, f in self.features.items():
            if k in self._image_keys:
                pngs = [fu.result() for fu in futures[k]]
                arrays.append(pa.StructArray.from_arrays(
                    [pa.array(pngs, pa.binary()), pa.array([f'frame-{i:06d}.png' for i in range(n)], pa.string())],
                    names=['bytes', 'path']))
            elif f['shape'] == [1]:
                arrays.append(pa.array(cols[k].reshape(n)))
            else:
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(cols[k].reshape(-1)), f['shape'][0]))
        table = pa.Table.from_arrays(arrays, schema=self._schema)
        chunk = ep_index // CHUNKS_SIZE if self.version == 'v2.1' else 0
        if self.version == 'v2.1':
            path = self.root / 'data' / f'chunk-{chunk:03d}' / f'episode_{ep_index:06d}.parquet'
            path.parent.mkdir(parents=True, exist_ok=True)
            # visible only at the next finalize, together with the meta that counts it
            self._staged_episodes += self._stage(path, lambda fh: pq.write_table(table, fh, compression='snappy'))
        else:
            if self._writer is None:
                d = self.root / 'data' / 'chunk-000'
                d.mkdir(parents=True, exist_ok=True)
                self._writer_tmp = d / f'.file-{self._file_index:03d}.parquet.tmp'
                self._writer = pq.ParquetWriter(self._writer_tmp, self._schema, compression='snappy')
            self._writer.write_table(table)  # one row group per episode
        self._episodes.append({'episode_index': ep_index, 'tasks': [task], 'length': n,
                               'data/chunk_index': chunk, 'data/file_index': self._file_index,
                               'dataset_from_index': start, 'dataset_to_index': start + n,
                               'success': bool(ep.success)})
        self._ep_stats.append(stats)
        self._total_frames += n
        if self.truth_dir is not None:
            self.truth_dir.mkdir(parents=True, exist_ok=True)
            keep = {k: v for k, v in cols.items() if k in self.features}
            atomic_write(self.truth_dir / f'episode_{ep_index:06d}.npz',
                         lambda fh: np.savez(fh, task=np.array(task), **keep))

    # -- checkpoints ---------------------------------------------------------------------------
    def finalize(self) -> None:
        """Make what was written so far a complete, loadable dataset.

        Every file (the data file, stats, tasks, episodes, info) is staged first; then all are
        renamed into place back to back, data first, so a crash leaves the previous checkpoint
        or this one, never a dataset whose meta disagrees with its data."""
        if self.features is None:
            return
        staged, self._staged_episodes = self._staged_episodes, []
        if self._writer is not None:
            self._writer.close()
            with open(self._writer_tmp, 'rb+') as fh:
                os.fsync(fh.fileno())
            staged.append((self._writer_tmp, self._writer_tmp.parent / f'file-{self._file_index:03d}.parquet'))
            self._writer, self._writer_tmp = None, None
            self._file_index += 1
        agg = {k: st.to_json(st.aggregate([s[k] for s in self._ep_stats])) for k in self.features}
        staged += self._stage(self.root / 'meta' / 'stats.json', json_writer(agg), binary=False)
        staged += self._stage_v30_meta() if self.version == 'v3.0' else self._stage_v21_meta()
        staged += self._stage(self.root / 'meta' / 'info.json', json_writer(self._info()), binary=False)
        publish_staged(staged)  # renames back to back, then the directories fsynced

    @staticmethod
    def _stage(path: Path, write, binary: bool = True) -> list[tuple[Path, Path]]:
        path.parent.mkdir(parents=True, exist_ok=True)
        return [(stage_write(path, write, binary), path)]

    def _info(self) -> dict:
        info = {'codebase_version': self.version, 'fps': self.fps, 'features': self.features,
                'total_episodes': len(self._episodes), 'total_frames': self._total_frames,
                'total_tasks': len(self._tasks), 'chunks_size': CHUNKS_SIZE}
        if self.version == 'v3.0':
            info.update({'data_files_size_in_mb': 100, 'video_files_size_in_mb': 200,
                         'data_path': 'data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet',
                         'video_path': None})
        else:
            info.update({'total_chunks': len(self._episodes) // CHUNKS_SIZE + 1, 'total_videos': 0,
                         'data_path': 'data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet',
                         'video_path': None})
        info.update({'robot_type': self.robot_type, 'splits': {'train': f'0:{len(self._episodes)}'}})
        return info

    def _stage_v30_meta(self) -> list[tuple[Path, Path]]:
        tasks = sorted(self._tasks.items(), key=lambda kv: kv[1])
        ttable = pa.table({'task_index': pa.array([i for _, i in tasks], pa.int64()),
                           'task': pa.array([t for t, _ in tasks], pa.string())})
        # lerobot reads tasks.iloc[i].name: the task must be the pandas index (else item['task'] == 0)
        pandas_meta = {'index_columns': ['task'], 'column_indexes': [], 'columns': [
            {'name': 'task_index', 'field_name': 'task_index', 'pandas_type': 'int64', 'numpy_type': 'int64',
             'metadata': None},
            {'name': 'task', 'field_name': 'task', 'pandas_type': 'unicode', 'numpy_type': 'object',
             'metadata': None}], 'creator': {'library': 'pyarrow', 'version': pa.__version__},
            'pandas_version': '2.3.3'}
        ttable = ttable.replace_schema_metadata({'pandas': json.dumps(pandas_meta)})
        staged = self._stage(self.root / 'meta' / 'tasks.parquet', lambda fh: pq.write_table(ttable, fh))
        cols: dict[str, list] = {k: [e[k] for e in self._episodes] for k in
                                 ('episode_index', 'tasks', 'length', 'data/chunk_index', 'data/file_index',
                                  'dataset_from_index', 'dataset_to_index')}
        for k in self.features:
            for s in st.QNAMES + ('min', 'max', 'mean', 'std', 'count'):
                cols[f'stats/{k}/{s}'] = [np.asarray(es[k][s]).tolist() for es in self._ep_stats]
        cols['meta/episodes/chunk_index'] = [0] * len(self._episodes)
        cols['meta/episodes/file_index'] = [0] * len(self._episodes)
        etable = pa.table(cols)
        return staged + self._stage(self.root / 'meta' / 'episodes' / 'chunk-000' / 'file-000.parquet',
                                    lambda fh: pq.write_table(etable, fh))

    def _stage_v21_meta(self) -> list[tuple[Path, Path]]:
        def jsonl(name: str, rows: list[dict]) -> list[tuple[Path, Path]]:
            text = ''.join(json.dumps(r) + '\n' for r in rows)
            return self._stage(self.root / 'meta' / name, lambda fh: fh.write(text), binary=False)
        tasks = [{'task_index': i, 'task': t} for t, i in sorted(self._tasks.items(), key=lambda kv: kv[1])]
        episodes = [{'episode_index': e['episode_index'], 'tasks': e['tasks'], 'length': e['length']}
                    for e in self._episodes]
        stats = [{'episode_index': e['episode_index'], 'stats': {k: st.to_json(v) for k, v in s.items()}}
                 for e, s in zip(self._episodes, self._ep_stats)]
        return jsonl('tasks.jsonl', tasks) + jsonl('episodes.jsonl', episodes) + jsonl('episodes_stats.jsonl', stats)

    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    def close(self) -> None:
        self.finalize()
        self._pool.shutdown(wait=True)
