"""LeRobot export frames/s: our writer vs lerobot 0.6.1's add_frame/save_episode, same frames.

1000 frames (10 episodes x 100) of a 128x128x3 image + state[8] + action[7]. Ours runs
here (pyarrow + Pillow, PNG on a thread pool, stats from the arrays); lerobot runs in its
own venv (Python 3.12, tools/lerobot_venv.sh) on frames generated from the same seed.

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
import sys, time, shutil, numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
eps, n, root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
frames = [(rng.integers(0, 256, (n, 128, 128, 3), dtype=np.uint8), rng.standard_normal((n, 8), dtype=np.float32),
           rng.standard_normal((n, 7), dtype=np.float32)) for _ in range(eps)]
features = {"image": {"dtype": "image", "shape": [128, 128, 3], "names": ["height", "width", "channels"]},
            "state": {"dtype": "float32", "shape": [8], "names": None},
            "actions": {"dtype": "float32", "shape": [7], "names": None}}
t0 = time.perf_counter()
ds = LeRobotDataset.create("local/bench", fps=10, features=features, root=root, use_videos=False)
for img, st, ac in frames:
    for i in range(n):
        ds.add_frame({"image": img[i], "state": st[i], "actions": ac[i], "task": "pick the cube"})
    ds.save_episode()
ds.finalize()
print(eps * n / (time.perf_counter() - t0))
'''


def ours(eps: int, n: int, root: Path) -> float:
    from rl_traj_ros.core.episodes.lerobot_writer import LeRobotWriter
    from rl_traj_ros.core.episodes.record import EpisodeRecord
    rng = np.random.default_rng(0)
    frames = [(rng.integers(0, 256, (n, 128, 128, 3), dtype=np.uint8), rng.standard_normal((n, 8), dtype=np.float32),
               rng.standard_normal((n, 7), dtype=np.float32)) for _ in range(eps)]
    records = [EpisodeRecord(0, e, observations=[{'main_images': img[i], 'states': st[i],
                                                  'task_descriptions': 'pick the cube'} for i in range(n)] +
                             [{'main_images': img[-1], 'states': st[-1]}], actions=list(ac), success=True)
               for e, (img, st, ac) in enumerate(frames)]
    t0 = time.perf_counter()
    w = LeRobotWriter(str(root))
    for r in records:
        w.write(r)
    w.close()
    return eps * n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--episodes', type=int, default=10)
    ap.add_argument('--frames', type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours_fps = ours(args.episodes, args.frames, Path(tmp) / 'ours')
        venv = subprocess.run(['bash', str(Path(__file__).resolve().parents[1] / 'tools' / 'lerobot_venv.sh')],
                              capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', '_ROS_WHEELS_BOOTSTRAP_COMPLETE')}
        env.update(HF_HUB_OFFLINE='1', HF_HOME=str(Path(tmp) / 'hf'))
        out = subprocess.run([f'{venv}/bin/python', '-c', LEROBOT_SIDE, str(args.episodes), str(args.frames),
                              str(Path(tmp) / 'lerobot')], capture_output=True, text=True, env=env, check=True)
        theirs = float(out.stdout.strip().splitlines()[-1])
    print(f'{args.episodes * args.frames} frames (128x128x3 + state[8] + action[7]), os.cpu_count()={os.cpu_count()}')
    print(f'ours (pyarrow + Pillow PNG pool, stats from arrays): {ours_fps:7.1f} frames/s')
    print(f'lerobot 0.6.1 add_frame/save_episode/finalize:      {theirs:7.1f} frames/s')
    print(f'ratio: {ours_fps / theirs:.2f}x')


if __name__ == '__main__':
    main()
