"""End-to-end chunks/s of the sim pipeline over ROS 2 vs the same loop in one process.

Both run the same workers (EnvWorker, PolicyWorker with the scripted expert, collector,
replay buffer with auto-save) on the same config: 1 env node x 2 envs, C=4, 10 training steps
x 10 chunks; state-only and with two 128x128 cameras. Reported per run: chunks/s, the share
of wall time spent stepping the envs, and the data path's share (everything that is not env
stepping: policy inference, messaging, joining, storing). For the ROS run the data path is
loop time - env time, where the loop runs from the env node's first request (after discovery)
to its last; process start-up and shutdown are excluded from both runs. The in-process run
times its data path directly.

    bash -c 'source env.sh && python bench/bench_sim_pipeline.py [--steps 10]'
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from rl_traj_ros.pipelines import sim_collect as sc


def config(out: str, images: bool, steps: int) -> dict:
    p = sc.apply_overrides(sc.load_params(sc.DEFAULT_CONFIG), num_env_nodes=1, num_envs=2, steps=steps,
                           output_dir=out, image_obs=images)
    p['franka_env_node'].update(collect_episodes=False, camera_topic_rate_hz=0.0)
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--steps', type=int, default=10)
    args = ap.parse_args()
    os.environ.setdefault('ROS_DOMAIN_ID', '87')
    rows = []
    for images in (False, True):
        for mode in ('in-process', 'ros'):
            tmp = tempfile.mkdtemp(prefix='bench_sim_')
            try:
                p = config(tmp, images, args.steps)
                if mode == 'ros':
                    r = sc.run_ros(p, 1, tmp, quiet=True)
                    assert not r['failed'], r['exit_codes']
                    data = r['loop_s'] - r['env_s']
                    rtt = r['wait_s']
                else:
                    r = sc.run_inprocess(p, 1, tmp)
                    data = rtt = r['data_path_s']
                rows.append((images, mode, r['chunks'], r['loop_s'], r['env_s'], data, rtt))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f'1 env node x 2 envs, C=4, {args.steps} steps x 10 chunks, scripted expert')
    print(f"{'obs':<18}{'run':<12}{'chunks':>7}{'chunks/s':>10}{'env share':>11}{'data path share':>17}"
          f"{'policy ms/chunk':>17}")
    for images, mode, chunks, wall, env_s, data, rtt in rows:
        print(f"{'2 cameras 128x128' if images else 'state only':<18}{mode:<12}{chunks:>7}{chunks / wall:>10.2f}"
              f"{env_s / wall:>10.0%}{data / wall:>16.0%}{rtt / chunks * 1e3:>16.1f}")
    print('policy ms/chunk: the env blocked on the reply (ROS: publish to reply, incl. inference; '
          'in-process: inference + collector + buffer)')
    for images in (False, True):
        ip = next(r for r in rows if r[0] == images and r[1] == 'in-process')
        ros = next(r for r in rows if r[0] == images and r[1] == 'ros')
        print(f"{'cameras' if images else 'state only'}: ROS / in-process chunks/s = "
              f"{(ros[2] / ros[3]) / (ip[2] / ip[3]):.2f}")


if __name__ == '__main__':
    main()
