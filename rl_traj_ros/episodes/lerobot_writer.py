"""LeRobot dataset export with pyarrow + numpy + Pillow only (lerobot is never imported).

Two layouts: ``v3.0`` (what current lerobot reads; default) and ``v2.1`` (the spec's layout,
plus ``episodes_stats.jsonl`` so lerobot's converter accepts it). Two namings: ``lerobot``
(default: ``observation.state``, ``observation.images.<camera>``, ``action``, ``next.reward``,
``next.done``, ``next.success``, the keys stock LeRobot policies and tools look for, with
per-dimension names from the env) and ``rlinf`` (the spec's ``image``, ``state``, ``actions``,
``done``, ``is_success``). Camera streams are PNG in the Parquet file or MP4 (AV1, as lerobot
0.6.1 encodes them; video.py). The writer is initialised lazily from the first episode (image
sizes, state and action dims), encodes PNGs on a thread pool and each camera's video on its own
thread (Pillow and PyAV release the GIL), computes stats from the arrays it writes, and makes
every checkpoint (``finalize``) a complete, loadable dataset: data and video files are written
under temp names and renamed, meta files are replaced atomically.
See shared/research/lerobot-format.md for the contract lerobot 0.6.1 checks.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from ..params.defaults import ENV
from ..storage.files import atomic_write, json_writer, publish_staged
from . import lerobot_meta as meta
from . import lerobot_stats as st
from .lerobot_format import (CHUNKS_SIZE, DATA_FILES_SIZE_MB, DEFAULT_FEATURES, EXTRA_IMAGE_KEYS, IMAGE_STORAGES,
                             MAIN_IMAGE_KEYS, NAMINGS, STATE_KEYS, TASK_KEYS, VIDEO_PATH, _first, _np, holds_dataset,
                             png_bytes, to_uint8_image)
from .record import EpisodeRecord
from .video import VideoEncoding, VideoFile, check_encoder, check_frame_size, probe_video_info

MAX_PENDING_VIDEO_EPISODES = 4  # per camera: a slow encoder slows the writer instead of eating memory


class LeRobotWriter:
    """Writes EpisodeRecords as a LeRobot dataset under ``root``.

    ``compress_level`` trades PNG size for speed (lossless either way; lerobot uses 6).
    ``camera_names`` name the camera streams (main camera first, then the extra views) in the
    lerobot naming; ``state_names`` / ``action_names`` say what each dimension is (lerobot's
    plots and tools show them); without them ``state_<i>`` / ``action_<i>``.
    ``image_storage='video'`` stores camera streams as MP4 (v3.0 only; lossy, ~10-50x smaller).
    """

    def __init__(self, root: str, fps: int = ENV.fps, robot_type: str = 'panda', version: str = 'v3.0',
                 workers: Optional[int] = None, compress_level: int = 1, default_task: str = '',
                 truth_dir: Optional[str] = None, naming: str = 'lerobot', image_storage: str = ENV.image_storage,
                 camera_names: Optional[Sequence[str]] = None, state_names: Optional[Sequence[str]] = None,
                 action_names: Optional[Sequence[str]] = None, video_encoding: Optional[VideoEncoding] = None):
        if version not in ('v3.0', 'v2.1'):
            raise ValueError(f"version must be 'v3.0' or 'v2.1', got {version!r}")
        if naming not in NAMINGS:
            raise ValueError(f'naming must be one of {sorted(NAMINGS)}, got {naming!r}')
        if image_storage not in IMAGE_STORAGES:
            raise ValueError(f'image_storage must be one of {IMAGE_STORAGES}, got {image_storage!r}')
        if image_storage == 'video' and version != 'v3.0':
            raise ValueError("image_storage='video' needs lerobot_version 'v3.0' (v2.1 is written for conversion)")
        self.naming, self.image_storage = NAMINGS[naming], image_storage
        self.camera_names = list(camera_names or ())
        self.state_names = list(state_names) if state_names else None
        self.action_names = list(action_names) if action_names else None
        self.video_encoding = video_encoding or VideoEncoding()
        if image_storage == 'video':
            check_encoder(self.video_encoding)
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
        self._cameras: list[tuple[str, str, Optional[int]]] = []  # (feature key, 'main'|'extra', extra index)
        self._image_keys: list[str] = []  # PNG in the data file
        self._video_keys: list[str] = []  # MP4 files
        self._videos: dict[str, VideoFile] = {}  # open file per camera until the next finalize
        self._video_pools: dict[str, ThreadPoolExecutor] = {}
        self._video_pending: dict[str, list[Future]] = {}
        self._video_queued: dict[str, int] = {}
        self._tasks: dict[str, int] = {}
        self._episodes: list[dict] = []
        self._ep_stats: list[dict[str, dict]] = []
        self._total_frames = 0
        self._file_index = 0        # the data file episodes are appended to
        self._video_file_index = 0  # one MP4 per camera per finalize
        self.data_files_size_mb = DATA_FILES_SIZE_MB
        self._writer: Optional[pq.ParquetWriter] = None
        self._writer_tmp: Optional[Path] = None
        self._schema: Optional[pa.Schema] = None
        self._staged_episodes: list[tuple[Path, Path]] = []  # v2.1 episode files awaiting finalize

    # -- lazy initialisation -----------------------------------------------------------------
    def _init_features(self, ep: EpisodeRecord) -> None:
        obs0 = ep.observations[0]
        nm = self.naming
        streams: list[tuple[str, Optional[int], tuple]] = []
        main = _first(obs0, MAIN_IMAGE_KEYS)
        if main is not None:
            streams.append(('main', None, to_uint8_image(main).shape))
        extra = _first(obs0, EXTRA_IMAGE_KEYS)
        if extra is not None:
            e = to_uint8_image(extra)
            streams += ([('extra', None, e.shape)] if e.ndim == 3 else
                        [('extra', i, e.shape[1:]) for i in range(e.shape[0])])
        keys = nm.camera_keys([(src, i) for src, i, _ in streams], self.camera_names)
        dtype = 'video' if self.image_storage == 'video' else 'image'
        feats: dict[str, dict] = {}
        for key, (src, i, shape) in zip(keys, streams):
            feats[key] = {'dtype': dtype, 'shape': list(shape), 'names': ['height', 'width', 'channels']}
            self._cameras.append((key, src, i))
        state = _first(obs0, STATE_KEYS)
        if state is not None:
            d = int(_np(state).size)
            feats[nm.state] = {'dtype': 'float32', 'shape': [d], 'names': self._dim_names('state', d)}
        a = int(_np(ep.actions[0]).size)
        feats[nm.action] = {'dtype': 'float32', 'shape': [a], 'names': self._dim_names('action', a)}
        if nm.reward:
            feats[nm.reward] = {'dtype': 'float32', 'shape': [1], 'names': None}
        feats[nm.done] = {'dtype': 'bool', 'shape': [1], 'names': None}
        feats[nm.success] = {'dtype': 'bool', 'shape': [1], 'names': None}
        if nm.intervention:  # float32 (1,) as LeRobot's HIL-SERL recorder writes its complementary_info
            feats[nm.intervention] = {'dtype': 'float32', 'shape': [1], 'names': ['is_intervention']}
        if nm.reward_source:  # which source gave next.reward: 0 env, 1 success classifier, 2 operator
            feats[nm.reward_source] = {'dtype': 'float32', 'shape': [1], 'names': ['reward_source']}
        for k, (dt, shape) in DEFAULT_FEATURES.items():
            feats[k] = {'dtype': dt, 'shape': shape, 'names': None}
        self.features = feats
        self._image_keys = [k for k, f in feats.items() if f['dtype'] == 'image']
        self._video_keys = [k for k, f in feats.items() if f['dtype'] == 'video']
        for k in self._video_keys:
            check_frame_size(self.video_encoding, *feats[k]['shape'][:2])
            self._video_pools[k] = ThreadPoolExecutor(max_workers=1, thread_name_prefix='lerobot-video')
            self._video_pending[k] = []

    def _cameras_keys(self) -> list[str]:
        return [k for k, _, _ in self._cameras]

    def _dim_names(self, what: str, d: int) -> list[str]:
        names = self.state_names if what == 'state' else self.action_names
        if names is None:
            return [f'{what}_{i}' for i in range(d)]
        if len(names) != d:
            raise ValueError(f'{what}_names has {len(names)} entries but the {what} has {d} dims: {names}')
        return [str(n) for n in names]

    def _build_schema(self) -> None:
        fields = []
        hf = {}
        for k, f in self.features.items():
            if f['dtype'] == 'video':  # in the MP4 files, not in the data file
                continue
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
        nm = self.naming
        cols: dict[str, np.ndarray] = {}
        extras: Optional[np.ndarray] = None
        for key, src, i in self._cameras:
            if src == 'main':
                cols[key] = np.stack([to_uint8_image(_first(o, MAIN_IMAGE_KEYS)) for o in obs])
                continue
            if extras is None:
                extras = np.stack([to_uint8_image(_first(o, EXTRA_IMAGE_KEYS)) for o in obs])
            cols[key] = extras if i is None else extras[:, i]
        for key, _, _ in self._cameras:
            want = tuple(self.features[key]['shape'])
            if cols[key].shape[1:] != want:
                raise ValueError(f'episode {ep.episode_id} env {ep.env_idx}: {key} frames are {cols[key].shape[1:]}, '
                                 f'the dataset was initialised with {want}')
        if nm.state in self.features:
            cols[nm.state] = np.stack([_np(_first(o, STATE_KEYS)).reshape(-1) for o in obs]).astype(np.float32)
        cols[nm.action] = np.stack([_np(a).reshape(-1) for a in ep.actions]).astype(np.float32)
        for k in (nm.state, nm.action):
            if k in cols and cols[k].shape[1] != self.features[k]['shape'][0]:
                raise ValueError(f'episode {ep.episode_id} env {ep.env_idx}: {k} has {cols[k].shape[1]} dims, '
                                 f'the dataset was initialised with {self.features[k]["shape"][0]}')
        if nm.reward:
            if len(ep.rewards) != n:
                raise ValueError(f'episode {ep.episode_id} env {ep.env_idx}: {n} actions but {len(ep.rewards)} rewards')
            cols[nm.reward] = np.asarray(ep.rewards, dtype=np.float32).reshape(n)
        cols[nm.done] = np.zeros(n, dtype=bool)
        cols[nm.done][-1] = True
        if nm.reward:  # lerobot's recorders: next.success marks the steps that succeeded (the success
            # step, and the steps_after_success the env went on for: the frames that show it)
            stepped = np.asarray(ep.step_successes if len(ep.step_successes) == n else [False] * n, bool)
            cols[nm.success] = (stepped | cols[nm.done]) & bool(ep.success)
        else:  # the spec's is_success: the episode's outcome on every frame
            cols[nm.success] = np.full(n, bool(ep.success))
        if nm.intervention:
            flags = ep.interventions if len(ep.interventions) == n else [False] * n
            cols[nm.intervention] = np.asarray(flags, np.float32)
        if nm.reward_source:
            cols[nm.reward_source] = np.asarray(ep.reward_sources if len(ep.reward_sources) == n else [0] * n,
                                                np.float32)
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
            self._build_schema()
            (self.root / 'meta').mkdir(parents=True, exist_ok=True)
        self._raise_video_errors()
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
        stats = {k: (st.image_stats(cols[k]) if k in self._cameras_keys() else st.numeric_stats(cols[k].reshape(n, -1)))
                 for k in self.features}
        video_meta = self._encode_videos(cols, n)
        arrays = []
        for k, f in self.features.items():
            if k in self._video_keys:
                continue
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
            self._staged_episodes += meta.stage(path, lambda fh: pq.write_table(table, fh, compression='snappy'))
        else:
            if self._writer is None:
                self._open_data_file()
            self._writer.write_table(table)  # one row group per episode
        self._episodes.append({'episode_index': ep_index, 'tasks': [task], 'length': n,
                               'data/chunk_index': chunk, 'data/file_index': self._file_index,
                               'dataset_from_index': start, 'dataset_to_index': start + n,
                               **video_meta, 'success': bool(ep.success)})
        self._ep_stats.append(stats)
        self._total_frames += n
        if self.truth_dir is not None:
            self.truth_dir.mkdir(parents=True, exist_ok=True)
            keep = {k: v for k, v in cols.items() if k in self.features}
            atomic_write(self.truth_dir / f'episode_{ep_index:06d}.npz',
                         lambda fh: np.savez(fh, task=np.array(task), **keep))

    def _open_data_file(self) -> None:
        """As LeRobot's recorder: episodes go on into the current data file until it holds
        ``data_files_size_mb``; a finalized file is copied (row group by row group) into the new
        temp file, which replaces it at the next finalize, so readers see either version whole."""
        d = self.root / 'data' / 'chunk-000'
        d.mkdir(parents=True, exist_ok=True)
        final = d / f'file-{self._file_index:03d}.parquet'
        if final.exists() and final.stat().st_size >= self.data_files_size_mb * 1e6:
            self._file_index += 1
            final = d / f'file-{self._file_index:03d}.parquet'
        self._writer_tmp = d / f'.{final.name}.tmp'
        self._writer = pq.ParquetWriter(self._writer_tmp, self._schema, compression='snappy')
        if final.exists():
            done = pq.ParquetFile(final)
            for i in range(done.num_row_groups):
                self._writer.write_table(done.read_row_group(i))

    # -- video ---------------------------------------------------------------------------------
    def _encode_videos(self, cols: dict[str, np.ndarray], n: int) -> dict[str, Any]:
        """Queue the episode's frames on each camera's encoder thread; return its episodes-table
        columns (the episode's place in the camera's current file)."""
        meta: dict[str, Any] = {}
        for k in self._video_keys:
            vf = self._videos.get(k)
            if vf is None:
                h, w = self.features[k]['shape'][:2]
                final = self.root / VIDEO_PATH.format(video_key=k, chunk_index=0, file_index=self._video_file_index)
                final.parent.mkdir(parents=True, exist_ok=True)
                vf = self._videos[k] = VideoFile(final.parent / f'.{final.name}.tmp', self.fps, h, w,
                                                 self.video_encoding)
                self._video_queued[k] = 0  # frames handed to the encoder (it may still be behind)
            pending = self._video_pending[k]
            while len(pending) >= MAX_PENDING_VIDEO_EPISODES:
                pending.pop(0).result()
            pending.append(self._video_pools[k].submit(vf.add, cols[k]))
            meta.update({f'videos/{k}/chunk_index': 0, f'videos/{k}/file_index': self._video_file_index,
                         f'videos/{k}/from_timestamp': self._video_queued[k] / self.fps,
                         f'videos/{k}/to_timestamp': (self._video_queued[k] + n) / self.fps})
            self._video_queued[k] += n
        return meta

    def _raise_video_errors(self) -> None:
        for k, pending in self._video_pending.items():
            done = [f for f in pending if f.done()]
            for f in done:
                pending.remove(f)
                f.result()  # re-raises an encoder error in the writer thread

    def _close_videos(self) -> list[tuple[Path, Path]]:
        """Finish every camera's file (encoder flushed, MP4 index written, fsynced) for staging."""
        staged = []
        for k, vf in self._videos.items():
            for f in self._video_pending[k]:
                f.result()
            self._video_pending[k] = []
            self._video_pools[k].submit(vf.close).result()
            if 'info' not in self.features[k]:
                self.features[k]['info'] = probe_video_info(vf.path, self.video_encoding)
            staged.append((vf.path, vf.path.parent / vf.path.name[1:-len('.tmp')]))
        if self._videos:
            self._video_file_index += 1
        self._videos = {}
        return staged

    # -- checkpoints ---------------------------------------------------------------------------
    def finalize(self) -> None:
        """Make what was written so far a complete, loadable dataset.

        Every file (the data file, stats, tasks, episodes, info) is staged first; then all are
        renamed into place back to back, data first, so a crash leaves the previous checkpoint
        or this one, never a dataset whose meta disagrees with its data."""
        if self.features is None:
            return
        staged, self._staged_episodes = self._staged_episodes, []
        staged += self._close_videos()
        if self._writer is not None:
            self._writer.close()
            with open(self._writer_tmp, 'rb+') as fh:
                os.fsync(fh.fileno())
            staged.append((self._writer_tmp, self._writer_tmp.parent / f'file-{self._file_index:03d}.parquet'))
            self._writer, self._writer_tmp = None, None
        agg = {k: st.to_json(st.aggregate([s[k] for s in self._ep_stats])) for k in self.features}
        staged += meta.stage(self.root / 'meta' / 'stats.json', json_writer(agg, sort_keys=False, indent=4),
                              binary=False)
        if self.version == 'v3.0':
            staged += meta.stage_v30(self.root, self._tasks, self._episodes, self._video_keys, self.features,
                                     self._ep_stats)
        else:
            staged += meta.stage_v21(self.root, self._tasks, self._episodes, self._ep_stats)
        info = meta.info(self.version, self.fps, self.features, self._episodes, self._total_frames, len(self._tasks),
                         bool(self._video_keys), self.robot_type)
        # key order as lerobot writes it: its camera_keys follow the features' order
        staged += meta.stage(self.root / 'meta' / 'info.json', json_writer(info, sort_keys=False, indent=4),
                              binary=False)
        publish_staged(staged)  # renames back to back, then the directories fsynced

    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    def close(self) -> None:
        try:
            self.finalize()
        finally:
            self._pool.shutdown(wait=True)
            for pool in self._video_pools.values():
                pool.shutdown(wait=True)
