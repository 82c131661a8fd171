"""The meta files of a LeRobot dataset (``meta/info.json``, tasks, episodes, per-episode stats).

Each is staged (written under a temp name, fsynced) and returned as ``(temp, final)`` pairs;
the writer renames a checkpoint's files back to back (``storage.files.publish_staged``), so a
crash leaves the previous checkpoint or this one.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..storage.files import stage_write
from . import lerobot_stats as st
from .lerobot_format import CHUNKS_SIZE, DATA_FILES_SIZE_MB, VIDEO_FILES_SIZE_MB, VIDEO_PATH

Staged = list[tuple[Path, Path]]


def stage(path: Path, write: Callable, binary: bool = True) -> Staged:
    path.parent.mkdir(parents=True, exist_ok=True)
    return [(stage_write(path, write, binary), path)]


def info(version: str, fps: int, features: dict, episodes: list[dict], total_frames: int, num_tasks: int,
         has_videos: bool, robot_type: str) -> dict:
    """``meta/info.json``, keys in lerobot's order (its camera_keys follow the features')."""
    out = {'codebase_version': version, 'fps': fps, 'features': features, 'total_episodes': len(episodes),
           'total_frames': total_frames, 'total_tasks': num_tasks, 'chunks_size': CHUNKS_SIZE}
    if version == 'v3.0':
        out.update({'data_files_size_in_mb': DATA_FILES_SIZE_MB, 'video_files_size_in_mb': VIDEO_FILES_SIZE_MB,
                    'data_path': 'data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet',
                    'video_path': VIDEO_PATH if has_videos else None})
    else:
        out.update({'total_chunks': len(episodes) // CHUNKS_SIZE + 1, 'total_videos': 0,
                    'data_path': 'data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet',
                    'video_path': None})
    out.update({'robot_type': robot_type, 'splits': {'train': f'0:{len(episodes)}'}})
    return out


def stage_v30(root: Path, tasks: dict[str, int], episodes: list[dict], video_keys: list[str], features: dict,
              ep_stats: list[dict]) -> Staged:
    """v3.0: ``meta/tasks.parquet`` and ``meta/episodes/chunk-000/file-000.parquet``."""
    ordered = sorted(tasks.items(), key=lambda kv: kv[1])
    ttable = pa.table({'task_index': pa.array([i for _, i in ordered], pa.int64()),
                       'task': pa.array([t for t, _ in ordered], pa.string())})
    # lerobot reads tasks.iloc[i].name: the task must be the pandas index (else item['task'] == 0)
    pandas_meta = {'index_columns': ['task'], 'column_indexes': [], 'columns': [
        {'name': 'task_index', 'field_name': 'task_index', 'pandas_type': 'int64', 'numpy_type': 'int64',
         'metadata': None},
        {'name': 'task', 'field_name': 'task', 'pandas_type': 'unicode', 'numpy_type': 'object',
         'metadata': None}], 'creator': {'library': 'pyarrow', 'version': pa.__version__},
        'pandas_version': '2.3.3'}
    ttable = ttable.replace_schema_metadata({'pandas': json.dumps(pandas_meta)})
    staged = stage(root / 'meta' / 'tasks.parquet', lambda fh: pq.write_table(ttable, fh))
    cols: dict[str, list] = {k: [e[k] for e in episodes] for k in
                             ('episode_index', 'tasks', 'length', 'data/chunk_index', 'data/file_index',
                              'dataset_from_index', 'dataset_to_index')}
    for k in video_keys:
        for c in ('chunk_index', 'file_index', 'from_timestamp', 'to_timestamp'):
            cols[f'videos/{k}/{c}'] = [e[f'videos/{k}/{c}'] for e in episodes]
    for k in features:
        for s in st.QNAMES + ('min', 'max', 'mean', 'std', 'count'):
            cols[f'stats/{k}/{s}'] = [np.asarray(es[k][s]).tolist() for es in ep_stats]
    cols['meta/episodes/chunk_index'] = [0] * len(episodes)
    cols['meta/episodes/file_index'] = [0] * len(episodes)
    etable = pa.table(cols)
    return staged + stage(root / 'meta' / 'episodes' / 'chunk-000' / 'file-000.parquet',
                          lambda fh: pq.write_table(etable, fh))


def stage_v21(root: Path, tasks: dict[str, int], episodes: list[dict], ep_stats: list[dict]) -> Staged:
    """v2.1: ``tasks.jsonl``, ``episodes.jsonl`` and ``episodes_stats.jsonl``."""
    def jsonl(name: str, rows: list[dict]) -> Staged:
        text = ''.join(json.dumps(r) + '\n' for r in rows)
        return stage(root / 'meta' / name, lambda fh: fh.write(text), binary=False)
    task_rows = [{'task_index': i, 'task': t} for t, i in sorted(tasks.items(), key=lambda kv: kv[1])]
    episode_rows = [{'episode_index': e['episode_index'], 'tasks': e['tasks'], 'length': e['length']}
                    for e in episodes]
    stats = [{'episode_index': e['episode_index'], 'stats': {k: st.to_json(v) for k, v in s.items()}}
             for e, s in zip(episodes, ep_stats)]
    return jsonl('tasks.jsonl', task_rows) + jsonl('episodes.jsonl', episode_rows) + jsonl('episodes_stats.jsonl', stats)


__all__ = ['stage', 'info', 'stage_v30', 'stage_v21']
