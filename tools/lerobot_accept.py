"""Acceptance by the real client: load a dataset we wrote with lerobot 0.6.1 and compare every
frame with what was recorded.

Runs inside the lerobot venv (Python 3.12, tools/lerobot_venv.sh), offline:
    HF_HUB_OFFLINE=1 <lerobot-venv>/bin/python tools/lerobot_accept.py DATASET_DIR
        [--truth TRUTH_DIR | --reference DATASET_DIR] [--convert-v21] [--chunk N] [--video-tolerance T]

- ``--truth``: the writer's truth_dir npz files (every recorded array, before encoding);
- ``--reference``: another dataset of the same frames (e.g. the PNG twin of a video dataset),
  also read through lerobot;
- ``--convert-v21`` first runs lerobot's official v2.1 -> v3.0 converter on DATASET_DIR (in place);
- ``--chunk N`` also loads the dataset with ``delta_timestamps`` action chunks of N steps (as
  ACT / diffusion policies do) and checks every chunk against the frames and its padding mask.
PNG frames must be bit-exact; video frames (lossy AV1) must have a mean absolute error of at
most ``--video-tolerance`` (in [0, 1] pixel units) per frame and camera. Prints one summary line
(PASS/FAIL) and exits non-zero on any mismatch.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault('HF_HUB_OFFLINE', '1')
LEGACY = {'actions': 'action', 'state': 'observation.state', 'done': 'next.done'}


def _frames_truth(path: Path) -> dict[int, dict[str, np.ndarray]]:
    return {int(p.stem.split('_')[1]): dict(np.load(p)) for p in sorted(path.glob('episode_*.npz'))}


def _value(item: dict, key: str, dtype: str) -> np.ndarray:
    v = item[key]
    if dtype in ('image', 'video'):
        return (v.numpy().transpose(1, 2, 0) * 255.0).round().astype(np.uint8)
    return v.numpy() if hasattr(v, 'numpy') else np.asarray(v)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('dataset')
    ap.add_argument('--truth')
    ap.add_argument('--reference')
    ap.add_argument('--convert-v21', action='store_true')
    ap.add_argument('--chunk', type=int, default=0)
    ap.add_argument('--video-tolerance', type=float, default=0.02)
    args = ap.parse_args()
    root = Path(args.dataset).resolve()
    if args.convert_v21:
        subprocess.run([sys.executable, '-m', 'lerobot.scripts.convert_dataset_v21_to_v30', '--repo-id=local/accept',
                        f'--root={root}', '--push-to-hub=false'], check=True, capture_output=True)
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    ds = LeRobotDataset('local/accept', root=root)
    feats = {k: f for k, f in ds.meta.features.items() if k not in ('index', 'task_index', 'frame_index',
                                                                    'episode_index', 'timestamp')}
    truth = _frames_truth(Path(args.truth)) if args.truth else None
    ref = LeRobotDataset('local/reference', root=Path(args.reference).resolve()) if args.reference else None
    if ref is not None and len(ref) != len(ds):
        print(f'FAIL: {len(ds)} frames, the reference has {len(ref)}')
        return 1
    mismatches: list[str] = []
    worst_video = 0.0
    frames = 0
    for i in range(len(ds)):
        item = ds[i]
        ep, fi = int(item['episode_index']), int(item['frame_index'])
        want_item = ref[i] if ref is not None else None
        for k, f in feats.items() if truth is not None or ref is not None else ():
            if f['dtype'] == 'string':
                continue
            got = _value(item, k, f['dtype'])
            if truth is not None:
                if k not in truth[ep]:
                    continue
                want = truth[ep][k][fi]
            else:
                want = _value(want_item, k, ref.meta.features[k]['dtype'])
            if f['dtype'] == 'video':
                err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).mean() / 255.0)
                worst_video = max(worst_video, err)
                if err > args.video_tolerance:
                    mismatches.append(f'episode {ep} frame {fi} {k}: mean abs error {err:.4f}')
            elif not np.array_equal(np.asarray(got).reshape(-1), np.asarray(want).reshape(-1)):
                mismatches.append(f'episode {ep} frame {fi} {k}')
        want_task = str(truth[ep]['task']) if truth is not None else want_item['task'] if ref is not None else None
        if want_task is not None and item['task'] != want_task:
            mismatches.append(f'episode {ep} frame {fi} task {item["task"]!r} != {want_task!r}')
        if int(item['index']) != i:
            mismatches.append(f'row {i} index {int(item["index"])}')
        frames += 1
    expected = sum(len(next(v for k, v in t.items() if k in ('action', 'actions'))) for t in truth.values()) \
        if truth is not None else len(ref) if ref is not None else frames
    n_eps = len(truth) if truth is not None else ds.meta.total_episodes
    chunk_note = ''
    if args.chunk > 1:
        bad, checked = _check_chunks(root, ds, args.chunk)
        mismatches += bad
        chunk_note = f', {checked} action chunks of {args.chunk} (delta_timestamps) checked'
    ok = not mismatches and frames == expected and ds.meta.total_episodes == n_eps
    video_note = f', worst video frame error {worst_video:.4f} (tolerance {args.video_tolerance})' \
        if any(f['dtype'] == 'video' for f in feats.values()) else ''
    how = 'compared' if truth is not None or ref is not None else 'loaded (nothing to compare with)'
    print(f'lerobot {__import__("lerobot").__version__}: {ds.meta.total_episodes} episodes, {frames}/{expected} '
          f'frames {how} ({", ".join(sorted(feats))}), {len(mismatches)} mismatches{video_note}{chunk_note}: '
          f'{"PASS" if ok else "FAIL"}')
    for m in mismatches[:20]:
        print('  mismatch:', m)
    return 0 if ok else 1


def _check_chunks(root: Path, ds, n: int) -> tuple[list[str], int]:
    """Action chunks through delta_timestamps: chunk t = actions t..t+n-1 of the same episode,
    padded (and flagged in action_is_pad) past the episode's end."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    fps = ds.meta.fps
    cds = LeRobotDataset('local/accept', root=root, delta_timestamps={'action': [j / fps for j in range(n)]})
    bad: list[str] = []
    actions = np.stack([ds[i]['action'].numpy() for i in range(len(ds))])
    eps = np.array([int(ds[i]['episode_index']) for i in range(len(ds))])
    for i in range(len(cds)):
        item = cds[i]
        a, pad = item['action'].numpy(), item['action_is_pad'].numpy()
        for j in range(n):
            same_ep = i + j < len(ds) and eps[i + j] == eps[i]
            if bool(pad[j]) == same_ep or (same_ep and not np.array_equal(a[j], actions[i + j])):
                bad.append(f'row {i} chunk slot {j}')
                break
    return bad, len(cds)


if __name__ == '__main__':
    sys.exit(main())
