"""Why the replay buffer's writer thread copies with numpy (``storage.plain_copy``), not torch.

Each variant runs in a fresh process: a buffer of N trajectories (T=50, B=16, 128x128x3 image,
cache 5, window N, auto-save) is filled (its writer thread copies every cached trajectory
before writing it), then ``sample(256)`` from disk is timed on the main thread. Variant
"torch clone" swaps the writer's copy for ``Tensor.clone``; everything else is the same code.

    bash -c 'source env.sh && python bench/bench_writer_thread_copy.py [--trajectories 100]'
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def child(variant: str, n: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_replay_buffer import fresh, make_base, rate
    from rl_traj_ros.storage import replay_buffer as rb
    from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
    if variant == 'torch clone':
        rb.plain_copy = lambda v: v.clone()
    d = tempfile.mkdtemp(prefix='wtc_')
    try:
        base = make_base()
        buf = TrajectoryReplayBuffer(seed=0, cache_size=5, sample_window_size=n, auto_save=True, auto_save_path=d)
        for i in range(n):
            buf.add_trajectories([fresh(base, i)])
        buf.flush()
        r, _ = rate(lambda: buf.sample(256))
        buf.close()
        print(json.dumps({'variant': variant, 'samples_per_s': r * 256}))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--trajectories', type=int, default=100)
    ap.add_argument('--child', default=None)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.trajectories)
    import torch
    print(f'torch {torch.__version__}, {torch.get_num_threads()} intra-op threads; {args.trajectories} trajectories '
          f'added (writer thread copies each), then sample(256) from disk (cache 5) on the main thread')
    res = {}
    for rep in range(2):
        for variant in ('torch clone', 'numpy plain_copy'):
            out = subprocess.run([sys.executable, __file__, '--child', variant, '--trajectories',
                                  str(args.trajectories)],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])['samples_per_s']
            res.setdefault(variant, []).append(r)
            print(f'  run {rep + 1} {variant:<17} {r:9.0f} samples/s')
    best = {k: max(v) for k, v in res.items()}
    print(f"best of 2: torch clone {best['torch clone']:.0f}, numpy plain_copy {best['numpy plain_copy']:.0f} "
          f"samples/s; plain_copy / clone = {best['numpy plain_copy'] / best['torch clone']:.2f}")


if __name__ == '__main__':
    main()
