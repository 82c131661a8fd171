"""What the env node's success classifier costs per frame, on 1 and on 2 torch intra-op threads,
on an idle machine and while busy processes hold every core (as rendering and the learner do in
``bench_rlpd.py --reward classifier``): why the env node runs it on one thread.

The classifier as the bench trains it (front and wrist cameras, 64x64), one frame per call as the
env node scores a step. The busy processes are plain loops, one per core.

    bash -c 'source env.sh && python bench/bench_classifier_threads.py [--repeat 200]'
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch

from rl_traj_ros.rewards.classifier import SuccessClassifier


def ms_per_frame(model: SuccessClassifier, frame: torch.Tensor, threads: int, repeat: int) -> float:
    torch.set_num_threads(threads)
    for _ in range(10):
        model.probability(frame)
    t = time.perf_counter()
    for _ in range(repeat):
        model.probability(frame)
    return (time.perf_counter() - t) / repeat * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--repeat', type=int, default=200)
    args = ap.parse_args()
    model = SuccessClassifier(['front', 'wrist'], 64).eval()
    frame = torch.randint(0, 256, (1, 2, 64, 64, 3), dtype=torch.uint8)
    cores = os.cpu_count() or 1
    print(f'success classifier, 2 cameras 64x64, one frame per call, {cores} cores')
    for load in ('idle', f'{cores} busy processes'):
        busy = [] if load == 'idle' else [subprocess.Popen([sys.executable, '-c', 'while True: pass'])
                                          for _ in range(cores)]
        try:
            time.sleep(0.5 if busy else 0)
            one, two = (ms_per_frame(model, frame, n, args.repeat) for n in (1, 2))
        finally:
            for p in busy:
                p.kill()
                p.wait()
        print(f'  {load}: 1 thread {one:.2f} ms, 2 threads {two:.2f} ms per frame (2 threads / 1: {two / one:.1f}x)')


if __name__ == '__main__':
    main()
