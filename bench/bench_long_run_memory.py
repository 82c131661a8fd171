"""RSS of the collector and writer nodes over a long run: 10,500 chunks over real DDS.

A driver node publishes PolicyPart/EnvPart messages (synthetic, 1 source x 2 envs, L=25
chunks per step) to a real trajectory_collector_node and replay_buffer_writer_node, keeping
at most 200 chunk keys unacknowledged (the policy node's backpressure, via the collector's
KeyAck), and samples both processes' RSS every 1,500 chunks. The anchor is the node's own
RSS after warm-up (2,500 chunks): what the protocol keeps per chunk (completed keys, row
ledger, identity index) must not grow with the run once the writer's identity window
(``--dedupe-window`` trajectories) is full; the buffer index grows by one JSON text of a few
hundred bytes per stored trajectory (L=25 chunks).

    bash -c 'source env.sh && python bench/bench_long_run_memory.py [--chunks 10500]'
"""
from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

L, B = 25, 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--chunks', type=int, default=10500)
    ap.add_argument('--max-unacked', type=int, default=200)
    ap.add_argument('--dedupe-window', type=int, default=100,
                    help="the writer's in-memory identity window (node default 1024 = 25,600 chunks of this shape, "
                         'so a default-window run plateaus only after that)')
    args = ap.parse_args()
    import psutil
    import rclpy
    from rl_traj_ros import msg as M
    from rl_traj_ros.data.identity import new_run_id
    from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
    from rl_traj_ros.ros.compat import make_executor
    from rl_traj_ros.ros import conversion as cv
    from rl_traj_ros.ros.qos import DATA_QOS
    os.environ.setdefault('ROS_DOMAIN_ID', str(120 + os.getpid() % 50))
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    out = Path(tempfile.mkdtemp(prefix='bench_long_run_'))
    run_id = new_run_id()   # the nodes' and the driver's: a node drops another run's messages
    common = ['-p', f'chunks_per_epoch:={L}', '-p', f'num_envs:={B}', '-p', 'stats_period_s:=0.0']
    procs = {
        'writer': subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.nodes.replay_buffer_writer_node', '--ros-args',
                                    '-p', f'output_dir:={out}/buf', '-p', 'cache_size:=2',
                                    '-p', f'dedupe_window:={args.dedupe_window}', '-p', f'run_id:={run_id}'],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT),
        'collector': subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.nodes.trajectory_collector_node',
                                       '--ros-args', *common, '-p', f'run_id:={run_id}'],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)}
    spec = SyntheticSpec(num_epochs=1, chunks_per_epoch=L, sources=((0, 0),), envs_per_source=B, chunk=1,
                         action_dim=2, state_dim=4, done_prob=0.1)
    template = [(cv.policy_part_to_msg(p), cv.env_part_to_msg(e)) for p, e in make_parts(spec)]
    for pm, em in template:
        pm.run_id = em.run_id = run_id
    rclpy.init()
    node = rclpy.create_node('bench_long_run_driver')
    ex = make_executor()
    ex.add_node(node)
    pub_p = node.create_publisher(M.PolicyPart, '/rl_traj/policy_part', DATA_QOS)
    pub_e = node.create_publisher(M.EnvPart, '/rl_traj/env_part', DATA_QOS)
    acked: set = set()
    node.create_subscription(M.KeyAck, '/rl_traj/key_ack', lambda m: acked.update(
        (k.step_id, k.chunk_id) for k in m.keys), DATA_QOS)
    deadline = time.monotonic() + 60
    while (pub_p.get_subscription_count() < 1 or pub_e.get_subscription_count() < 1) and time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.1)
    sent = 0
    samples = []
    t0 = time.monotonic()
    try:
        step = 0
        while sent < args.chunks:
            for l, (pm, em) in enumerate(template):
                while sent - len(acked) >= args.max_unacked:
                    ex.spin_once(timeout_sec=0.01)
                pm2, em2 = copy.copy(pm), copy.copy(em)
                for m in (pm2, em2):
                    m.sources = [copy.deepcopy(s) for s in m.sources]
                    m.sources[0].key.step_id = step
                pub_p.publish(pm2)
                pub_e.publish(em2)
                sent += 1
                ex.spin_once(timeout_sec=0.0)
                if sent % 1500 == 1000 or sent == args.chunks:
                    while len(acked) < sent - (sent % L) and time.monotonic() - t0 < 900:
                        ex.spin_once(timeout_sec=0.05)
                    samples.append((sent, {n: psutil.Process(p.pid).memory_info().rss / 2 ** 20
                                           for n, p in procs.items()}))
                    rss = samples[-1][1]
                    print(f"chunks {sent:6d}  acked {len(acked):6d}  RSS collector {rss['collector']:6.1f} MB  "
                          f"writer {rss['writer']:6.1f} MB", flush=True)
            step += 1
    finally:
        for p in procs.values():
            p.send_signal(2)
        for p in procs.values():
            p.wait(30)
        node.destroy_node()
        rclpy.try_shutdown()
    dt = time.monotonic() - t0
    warm = next(s for s in samples if s[0] >= 2500)
    last = samples[-1]
    print(f'\n{sent} chunks in {dt:.0f} s ({sent / dt:.0f} chunks/s), {len(acked)} acknowledged end to end; '
          f'writer dedupe_window {args.dedupe_window} trajectories = {args.dedupe_window * L} chunks')
    for n in procs:
        growth = last[1][n] - warm[1][n]
        print(f'{n:<9} RSS after warm-up ({warm[0]} chunks) {warm[1][n]:6.1f} MB, at {last[0]} chunks '
              f'{last[1][n]:6.1f} MB: growth {growth:+.1f} MB = {growth / warm[1][n]:+.1%} of the warm-up RSS, '
              f'{growth * 2 ** 20 / (last[0] - warm[0]):.0f} bytes/chunk')


if __name__ == '__main__':
    main()
