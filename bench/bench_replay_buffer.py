"""TrajectoryReplayBuffer throughput and memory, against a naive torch.cat + index baseline.

Trajectory: T=50, B=16 (800 samples), per sample a 128x128x3 uint8 image, 8 float states,
7 float actions, reward and done (~39 MB as a pt file). Window 100.
  - add_trajectories (auto_save, pt): trajectories/s including the final flush
  - sample(256): from disk with cache 5 (memory-mapped reads of the sampled rows only;
    first call opens the window's files, later calls reuse the handles; the page cache is
    warm because the files were just written), and with cache 100 (all in memory)
  - naive: torch.cat of the window's trajectories into one tensor per field, index_select
  - peak RSS of a producer adding N trajectories with cache 5 (own process)

    bash -c 'source env.sh && python bench/bench_replay_buffer.py [--rss-trajectories 1000] [--dir D]'
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T, B, HW, WINDOW = 50, 16, 128, 100


def make_base(seed: int = 0) -> dict:
    import torch
    g = torch.Generator().manual_seed(seed)
    return {'curr_obs/main_images': torch.randint(0, 256, (T, B, HW, HW, 3), generator=g, dtype=torch.uint8),
            'curr_obs/states': torch.randn(T, B, 8, generator=g), 'actions': torch.randn(T, B, 7, generator=g),
            'rewards': torch.randn(T, B, 1, generator=g), 'dones': torch.zeros(T, B, 1, dtype=torch.bool)}


def fresh(base: dict, i: int) -> dict:
    out = {k: v.clone() for k, v in base.items()}
    out['rewards'].fill_(float(i))
    return out


def rate(fn, seconds: float = 3.0, min_calls: int = 3, warmup: float = 1.0) -> tuple[float, int]:
    """Calls/s after a warm-up (the allocator settles; every variant is measured alike)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup:
        fn()
    n, t0 = 0, time.perf_counter()
    while n < min_calls or time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - t0), n


def peak_rss_mb() -> float:
    """VmHWM: this process's own peak (ru_maxrss survives exec and would report the parent's)."""
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_child(n: int, directory: str) -> None:
    from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
    base = make_base()
    start = peak_rss_mb()
    t0 = time.perf_counter()
    with TrajectoryReplayBuffer(cache_size=5, sample_window_size=WINDOW, auto_save=True, auto_save_path=directory,
                                max_pending_writes=4) as buf:
        for i in range(n):
            buf.add_trajectories([fresh(base, i)])
    dt = time.perf_counter() - t0
    peak = peak_rss_mb()
    print(json.dumps({'n': n, 'start_mb': start, 'peak_mb': peak, 'traj_per_s': n / dt}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--rss-trajectories', type=int, default=1000)
    ap.add_argument('--dir', default=None, help='scratch directory (default: a temp dir, removed after)')
    ap.add_argument('--rss-child', type=int)
    args = ap.parse_args()
    if args.rss_child:
        return rss_child(args.rss_child, args.dir)
    import torch
    from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
    scratch = Path(args.dir or tempfile.mkdtemp(prefix='rb_bench_'))
    try:
        out = subprocess.run([sys.executable, __file__, '--rss-child', str(args.rss_trajectories), '--dir',
                              str(scratch / 'rss')], capture_output=True, text=True, check=True).stdout
        rss = json.loads(out.strip().splitlines()[-1])
        shutil.rmtree(scratch / 'rss')
        base = make_base()
        one = sum(v.numel() * v.element_size() for v in base.values()) / 1e6
        print(f'trajectory: T={T} B={B} -> {T * B} samples, {one:.1f} MB; window {WINDOW}')
        d = scratch / 'buf'
        buf = TrajectoryReplayBuffer(seed=0, cache_size=5, sample_window_size=WINDOW, auto_save=True,
                                     auto_save_path=str(d))
        t0 = time.perf_counter()
        for i in range(WINDOW):
            buf.add_trajectories([fresh(base, i)])
        buf.flush()
        add_rate = WINDOW / (time.perf_counter() - t0)
        print(f'add_trajectories (auto_save pt, incl. flush): {add_rate:8.1f} trajectories/s '
              f'({add_rate * one:.0f} MB/s)')
        t0 = time.perf_counter()
        buf.sample(256)
        first = 256 / (time.perf_counter() - t0)
        disk, _ = rate(lambda: buf.sample(256))
        disk *= 256
        buf.close()
        cached = TrajectoryReplayBuffer(seed=0, cache_size=WINDOW, sample_window_size=WINDOW)
        for i in range(WINDOW):
            cached.add_trajectories([fresh(base, i)])
        mem, _ = rate(lambda: cached.sample(256))
        mem *= 256
        cached.close()
        cached = None  # free its 100 trajectories before the naive copy is built
        # naive: everything concatenated, indexed directly
        flat = {k: torch.cat([v.reshape(T * B, *v.shape[2:])] * WINDOW) for k, v in base.items()}
        g = torch.Generator().manual_seed(0)
        naive, _ = rate(lambda: {k: v.index_select(0, torch.randint(len(v), (256,), generator=g))
                                 for k, v in flat.items()})
        naive *= 256
        flat.clear()
        print(f'sample(256) from disk, cache 5:   {disk:9.0f} samples/s  (first call, opening {WINDOW} files: '
              f'{first:.0f} samples/s)')
        print(f'sample(256) all cached (cache {WINDOW}): {mem:9.0f} samples/s')
        print(f'naive torch.cat + index_select:   {naive:9.0f} samples/s')
        print(f'ratios: disk/naive {disk / naive:.2f}, cached/naive {mem / naive:.2f}')
        shutil.rmtree(d)
        r = rss
        print(f"producer adding {r['n']} trajectories ({r['n'] * one / 1e3:.1f} GB) with cache 5: peak RSS "
              f"{r['peak_mb']:.0f} MB (after start-up {r['start_mb']:.0f} MB, growth {r['peak_mb'] - r['start_mb']:.0f} MB "
              f"= {(r['peak_mb'] - r['start_mb']) / one:.1f} trajectories; expected 7: 5 cached, which the 4 queued "
              f"share, + 1 copy being written + the producer's own), {r['traj_per_s']:.1f} trajectories/s")
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
    main()
