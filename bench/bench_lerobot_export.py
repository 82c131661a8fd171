"""LeRobot export, PNG and video: our writer vs lerobot 0.6.1's add_frame/save_episode, same frames.

Frames/s and bytes per frame for each camera storage. 1000 frames (10 episodes x 100) of a
128x128x3 camera + state[8] + action[7]. The camera frames are camera-like (a lit gradient
with a moving object and sensor noise), written once to a file that both sides read. Ours
runs here (pyarrow + Pillow PNG pool, or PyAV AV1 on a thread per camera; stats from the
arrays); lerobot runs in its own venv (Python 3.12, tools/lerobot_venv.sh) with its defaults
(PNG compress_level 6; libsvtav1 CRF 30 through its streaming encoder).

    bash -c 'source env.sh && python bench/bench_lerobot_export.py [--episodes 10 --frames 100]'
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

LEROBOT_SIDE = r'''
import sys, time, numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
src, root, storage = sys.argv[1], sys.argv[2], sys.argv[3]
d = np.load(src)
img, st, ac = d['images'], d['states'], d['actions']   # [E, T, ...]
dtype = 'video' if storage == 'video' else 'image'
features = {"observation.images.front": {"dtype": dtype, "shape": [128, 128, 3],
                                        "names": ["height", "width", "channels"]},
            "observation.state": {"dtype": "float32", "shape": [8], "names": None},
            "action": {"dtype": "float32", "shape": [7], "names": None}}
t0 = time.perf_counter()
ds = LeRobotDataset.create("local/bench", fps=10, features=features, root=root, use_videos=storage == 'video',
                           streaming_encoding=storage == 'video')
for e in range(img.shape[0]):
    for i in range(img.shape[1]):
        ds.add_frame({"observation.images.front": img[e, i], "observation.state": st[e, i], "action": ac[e, i],
                      "task": "pick the cube"})
    ds.save_episode()
ds.finalize()
print(img.shape[0] * img.shape[1] / (time.perf_counter() - t0))
'''


def camera_frames(eps: int, n: int, seed: int = 0) -> np.ndarray:
    """[E, T, 128, 128, 3] uint8: a lit gradient, a moving square, and sensor noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:128, 0:128]
    base = np.stack([x * 1.5, y * 1.2 + 40, (x + y) * 0.6 + 20], -1)
    out = np.empty((eps, n, 128, 128, 3), np.uint8)
    for e in range(eps):
        cx, cy = rng.uniform(20, 100, 2)
        vx, vy = rng.uniform(-1.5, 1.5, 2)
        for t in range(n):
            f = base.copy()
            px, py = int(cx + vx * t) % 112, int(cy + vy * t) % 112
            f[py:py + 16, px:px + 16] = (200, 60, 40)
            out[e, t] = np.clip(f + rng.normal(0, 3, f.shape), 0, 255).astype(np.uint8)
    return out


def dir_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob('*') if p.is_file())


def ours(src: Path, root: Path, storage: str) -> float:
    from rl_traj_ros.episodes.lerobot_writer import LeRobotWriter
    from rl_traj_ros.episodes.record import EpisodeRecord
    d = np.load(src)
    img, st, ac = d['images'], d['states'], d['actions']
    n = img.shape[1]
    records = [EpisodeRecord(0, e, observations=[{'main_images': img[e, i], 'states': st[e, i],
                                                  'task_descriptions': 'pick the cube'} for i in range(n)] +
                             [{'main_images': img[e, -1], 'states': st[e, -1]}], actions=list(ac[e]),
                             rewards=[0.0] * n, success=True)
               for e in range(img.shape[0])]
    t0 = time.perf_counter()
    w = LeRobotWriter(str(root), image_storage=storage, camera_names=['front'])
    for r in records:
        w.write(r)
    w.close()
    return img.shape[0] * n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--episodes', type=int, default=10)
    ap.add_argument('--frames', type=int, default=100)
    args = ap.parse_args()
    total = args.episodes * args.frames
    venv = subprocess.run(['bash', str(Path(__file__).resolve().parents[1] / 'tools' / 'lerobot_venv.sh')],
                          capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', '_ROS_WHEELS_BOOTSTRAP_COMPLETE')}
    print(f'{total} frames (128x128x3 camera + state[8] + action[7]), os.cpu_count()={os.cpu_count()}')
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / 'frames.npz'
        rng = np.random.default_rng(1)
        np.savez(src, images=camera_frames(args.episodes, args.frames),
                 states=rng.standard_normal((args.episodes, args.frames, 8), dtype=np.float32),
                 actions=rng.standard_normal((args.episodes, args.frames, 7), dtype=np.float32))
        env.update(HF_HUB_OFFLINE='1', HF_HOME=str(Path(tmp) / 'hf'), SVT_LOG='1')
        for storage in ('png', 'video'):
            mine = ours(src, Path(tmp) / f'ours_{storage}', storage)
            out = subprocess.run([f'{venv}/bin/python', '-c', LEROBOT_SIDE, str(src), str(Path(tmp) / f'lr_{storage}'),
                                  storage], capture_output=True, text=True, env=env)
            if out.returncode:
                raise SystemExit(out.stderr[-3000:])
            theirs = float(out.stdout.strip().splitlines()[-1])
            b_ours, b_theirs = dir_bytes(Path(tmp) / f'ours_{storage}'), dir_bytes(Path(tmp) / f'lr_{storage}')
            print(f'{storage:5s} ours {mine:7.1f} frames/s {b_ours / total:8.0f} bytes/frame | lerobot 0.6.1 '
                  f'{theirs:7.1f} frames/s {b_theirs / total:8.0f} bytes/frame | speed {mine / theirs:.2f}x, '
                  f'size {b_ours / b_theirs:.2f}x')


if __name__ == '__main__':
    main()
