"""A LeRobot dataset (v3.0 or v2.1, read with pyarrow; MP4 cameras decoded with PyAV) ->
per-episode folders of frames: episode_XXXXXX/step_XXXXXX_<camera>.jpg (one per camera) and
step_XXXXXX.txt (task, state, action, reward, done, success), for inspection without lerobot.
Either naming (lerobot's observation.images.<camera>, ...; or the spec's image, state, ...).

    python -m rl_traj_ros.viz.dataset_frames DATASET_DIR --out frames/ [--episodes 0 3]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from ..episodes.lerobot_reader import png_frame, video_frames


def _tasks(root: Path) -> dict[int, str]:
    if (root / 'meta' / 'tasks.parquet').exists():
        t = pq.read_table(root / 'meta' / 'tasks.parquet').to_pydict()
        return dict(zip(t['task_index'], t['task']))
    if (root / 'meta' / 'tasks.jsonl').exists():
        rows = [json.loads(x) for x in (root / 'meta' / 'tasks.jsonl').read_text().splitlines() if x.strip()]
        return {r['task_index']: r['task'] for r in rows}
    return {}


TEXT_KEYS = ('observation.state', 'state', 'action', 'actions', 'next.reward', 'next.done', 'done', 'next.success',
             'is_success', 'timestamp')


def export_frames(dataset_dir: str, out: str, episodes: list[int] | None = None) -> int:
    root = Path(dataset_dir)
    info = json.loads((root / 'meta' / 'info.json').read_text())
    image_keys = [k for k, f in info['features'].items() if f['dtype'] == 'image']
    videos = video_frames(root, info, episodes)
    video_keys = sorted({k for k, _ in videos})
    tasks = _tasks(root)
    files = sorted((root / 'data').glob('*/*.parquet'))
    if not files:
        raise FileNotFoundError(f'no data files under {root / "data"}')
    table = pa.concat_tables([pq.read_table(f) for f in files])
    written = 0
    for row in table.to_pylist():
        ep = int(row['episode_index'])
        if episodes is not None and ep not in episodes:
            continue
        d = Path(out) / f'episode_{ep:06d}'
        d.mkdir(parents=True, exist_ok=True)
        step = int(row['frame_index'])
        for k in image_keys + video_keys:
            name = d / f'step_{step:06d}_{k.removeprefix("observation.images.")}.jpg'
            img = Image.fromarray(png_frame(row[k]) if k in image_keys else videos[(k, ep)][step])
            img.save(name, quality=90)
        lines = [f'task: {tasks.get(int(row["task_index"]), row["task_index"])}']
        for k in TEXT_KEYS:
            if k in row:
                v = row[k]
                lines.append(f'{k}: ' + (' '.join(f'{x:.4f}' for x in v) if isinstance(v, list) else str(v)))
        (d / f'step_{step:06d}.txt').write_text('\n'.join(lines) + '\n')
        written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('dataset_dir')
    ap.add_argument('--out', default='dataset_frames')
    ap.add_argument('--episodes', type=int, nargs='*')
    args = ap.parse_args(argv)
    n = export_frames(args.dataset_dir, args.out, args.episodes)
    print(f'{n} frames written under {args.out}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
