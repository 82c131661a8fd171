"""Chunks/s through join + accumulate + flush, and peak memory, against the naive approach.

Shape: B=64 envs, C=8, A=7, two 128x128x3 uint8 images per env (main + 1 extra view),
transitions collected; rollout and pipeline modes. Naive = keep every part (and stack the same obs and next_obs images) in Python lists
keyed by TrajectoryKey and stack each field at the end (no fragment restore, no
validation, no interventions or rewards composition). Each variant runs in its own process
so peak RSS (ru_maxrss) is its own.

    bash -c 'source env.sh && python bench/bench_collector.py [--steps 3]'
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

B, C, A, HW, E, L = 64, 8, 7, 128, 2, 4


def parts(step_id: int):
    from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
    spec = SyntheticSpec(num_epochs=E, chunks_per_epoch=L, sources=((0, 0), (1, 0)), envs_per_source=B // 2, chunk=C,
                         action_dim=A, image_hw=(HW, HW), num_extra_views=1, step_id=step_id, seed=step_id)
    return [x for pr in make_parts(spec) for x in pr]


def run_variant(variant: str, steps: int) -> dict:
    import torch
    from rl_traj_ros.collect.collector import TrajectoryCollector, TrajectoryPlan
    data = [parts(s) for s in range(steps)]  # generated up front: not timed
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    outputs = 0
    if variant == 'naive':
        for step in data:
            store: dict = {}
            for p in step:
                store.setdefault(p.sources[0].key, []).append(p)
            keys = sorted(store)
            for sid in ((0, 0), (1, 0)):
                mine = [store[k] for k in keys if k.source_id == sid]
                pol = [x[0] if hasattr(x[0], 'output') else x[1] for x in mine]
                env = [x[1] if hasattr(x[0], 'output') else x[0] for x in mine]
                out = {'actions': torch.stack([p.output.forward_inputs['action'] for p in pol]),
                       'rewards': torch.stack([e.transition.rewards for e in env]),
                       'dones': torch.stack([e.transition.dones for e in env]),
                       'prev_values': torch.stack([p.output.prev_values for p in pol]),
                       'main_images': torch.stack([p.obs['main_images'] for p in pol]),
                       'extra_view_images': torch.stack([p.obs['extra_view_images'] for p in pol]),
                       'next_main_images': torch.stack([e.next_obs['main_images'] for e in env]),
                       'next_extra_view_images': torch.stack([e.next_obs['extra_view_images'] for e in env])}
                outputs += 1
                del out
    else:
        plan = TrajectoryPlan(mode=variant, num_epochs=E, chunks_per_epoch=L, sources=[(0, 0), (1, 0)],
                              envs_per_source=B // 2, num_actors=2)
        plan.collect.collect_transitions = True
        col = TrajectoryCollector(plan)
        for step in data:
            for p in step:
                outputs += len(col.push(p))
    dt = time.perf_counter() - t0
    chunks = steps * E * L * 2  # keys (both halves each)
    return {'variant': variant, 'chunks_per_s': chunks / dt, 'outputs': outputs,
            'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            'rss_growth_mb': (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--steps', type=int, default=3)
    ap.add_argument('--variant')
    ap.add_argument('--reps', type=int, default=3)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.steps)))
        return
    print(f'B={B} envs (2 sources), C={C}, A={A}, two {HW}x{HW}x3 images/env, E={E} x L={L} chunks/step, '
          f'{args.steps} steps; transitions collected')
    runs: dict = {v: [] for v in ('naive', 'rollout', 'pipeline')}
    for _ in range(args.reps):  # interleaved: machine noise hits every variant alike
        for v in runs:
            out = subprocess.run([sys.executable, __file__, '--variant', v, '--steps', str(args.steps)],
                                 capture_output=True, text=True, check=True).stdout
            runs[v].append(json.loads(out.strip().splitlines()[-1]))
    res = {}
    for v, rs in runs.items():
        r = res[v] = sorted(rs, key=lambda x: x['chunks_per_s'])[len(rs) // 2]
        each = ', '.join(f"{x['chunks_per_s']:.0f}" for x in rs)
        print(f"{v:<9} {r['chunks_per_s']:8.1f} chunks/s (median of {each})  peak RSS {r['peak_rss_mb']:6.0f} MB  "
              f"(growth while collecting {r['rss_growth_mb']:5.0f} MB)  outputs {r['outputs']}")
    for v in ('rollout', 'pipeline'):
        print(f"{v} / naive: {res[v]['chunks_per_s'] / res['naive']['chunks_per_s']:.2f}x chunks/s")


if __name__ == '__main__':
    main()
