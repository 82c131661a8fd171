"""Faults injected into the real multi-process pipeline; every chunk must be stored exactly once.

Each test prints its figure: chunks sent / stored / lost / duplicated."""
import json
import signal
import time
from pathlib import Path

import pytest

from faults import run_with_faults
from rl_traj_ros.pipelines import sim_collect as sc


def params(tmp, steps=6, chunks=10, **env):
    p = sc.apply_overrides(sc.load_params(sc.DEFAULT_CONFIG), num_env_nodes=1, num_envs=2, steps=steps,
                           output_dir=str(tmp), image_obs=False)
    for n in sc.NODES:
        p[n].update(num_epochs=1, chunks_per_epoch=chunks)
    p['franka_env_node'].update({'collect_episodes': False, 'camera_topic_rate_hz': 0.0, **env})
    p['policy_node'].update(resend_after_s=5.0)
    p['trajectory_collector_node'].update(resend_after_s=5.0, pending_timeout_s=600.0)
    return p


def audit(out_dir, sent_keys, num_envs=2):
    """Chunks sent / stored / lost / duplicated, counted per (chunk key, env row) cell from the
    index: a shard or micro-batch holds some rows of many keys."""
    from rl_traj_ros.data.synthetic import stored_cells
    cells = [(k.as_tuple(), b) for k, b in stored_cells(Path(out_dir) / 'replay_buffer')]
    sent = {(k, b) for k in sent_keys for b in range(num_envs)}
    lost = len(sent - set(cells))
    dup = len(cells) - len(set(cells))
    complete = {k for k in sent_keys if all((k, b) in set(cells) for b in range(num_envs))}
    print(f'\nchunks sent {len(sent_keys)} / stored {len(complete)} / lost {lost} rows / duplicated {dup} rows')
    return lost, dup, len(complete)


def expected_keys(steps, chunks, ranks=(0,)):
    return [(s, 0, r, 0, c) for s in range(steps) for r in ranks for c in range(chunks)]


@pytest.mark.parametrize('collector', [{}, {'mode': 'pipeline', 'num_actors': 2}], ids=['rollout', 'pipeline_2_actors'])
def test_collector_and_writer_killed_and_restarted(tmp_path, collector):
    mid_run = []

    def chaos(ctl):
        ctl.wait_stat('env_0', 'chunks', 30)  # faults keyed to progress: start-up time varies with load
        mid_run.append(ctl.procs['env_0'].poll() is None)
        ctl.kill('collector')          # SIGKILL mid-run: joined but unflushed chunks are gone
        time.sleep(1)
        ctl.restart('collector')       # the policy node resends every unacknowledged part
        ctl.wait_stat('env_0', 'chunks', 100)
        mid_run.append(ctl.procs['env_0'].poll() is None)
        ctl.kill('writer')             # SIGKILL: received but not yet stored trajectories are gone
        time.sleep(1)
        ctl.restart('writer')          # the collector resends; the writer dedupes by identity

    steps = 14  # faults at 30 and 100 chunks; 40 more after the writer's restart
    p = params(tmp_path, steps=steps)
    p['trajectory_collector_node'].update(collector)
    r = run_with_faults(p, 1, str(tmp_path), chaos)
    assert mid_run == [True, True], 'the faults must hit a running collection'
    assert r['exit_codes']['env_0'] == 0
    lost, dup, stored = audit(tmp_path, expected_keys(steps, 10))
    assert (lost, dup, stored) == (0, 0, steps * 10)
    policy_log = ''.join(r['logs']['policy'])
    assert 'resent' in policy_log and "'resent': 0" not in policy_log  # the restarted collector got resends


def test_sigint_mid_run_flushes_and_sigkill_leaves_loadable_outputs(tmp_path):
    from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
    import pyarrow.parquet as pq

    def chaos(ctl):
        ctl.wait_stat('env_0', 'chunks', 100)  # several episodes recorded, a finalize checkpoint done
        ctl.kill('env_0', signal.SIGKILL)  # mid-run, mid-episode, maybe mid-write

    p = params(tmp_path, steps=50, collect_episodes=True, export_format='lerobot', finalize_interval=2)
    r = run_with_faults(p, 1, str(tmp_path), chaos, drain_timeout_s=20)
    buf = TrajectoryReplayBuffer(sample_window_size=0)
    buf.load_checkpoint(str(tmp_path / 'replay_buffer'))  # loads: nothing torn
    assert len(buf) >= 1
    ds = tmp_path / 'collected_data' / 'env_0'
    info = json.loads((ds / 'meta' / 'info.json').read_text())
    rows = sum(pq.read_table(f).num_rows for f in sorted((ds / 'data').glob('*/*.parquet')))
    assert rows == info['total_frames'] > 0  # the last finalize checkpoint is complete and consistent
    assert r['exit_codes']['writer'] == 0 and r['exit_codes']['collector'] == 0  # SIGINT flushed cleanly


@pytest.fixture
def small_disk(tmp_path):
    import os
    import subprocess
    d = tmp_path / 'small'
    d.mkdir()
    if os.geteuid() != 0 or subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', str(d)]).returncode:
        pytest.skip('needs root to mount a small tmpfs')
    try:
        yield d
    finally:
        subprocess.run(['umount', '-l', str(d)])


def test_disk_full_pauses_intake_and_resumes_without_loss(tmp_path, small_disk):
    filler = small_disk / 'filler'
    with open(filler, 'wb') as f:  # leave ~40 kB: a few trajectories fit, then ENOSPC
        f.write(b'\0' * (1024 * 1024 - 40 * 1024))
    state = {}

    def chaos(ctl):
        state['stalled'] = ctl.wait_log('writer', 'No space left on device')
        time.sleep(2)  # intake stays paused while the disk is full
        state['writer_alive'] = ctl.procs['writer'].poll() is None
        filler.unlink()  # space returns

    steps = 12
    p = params(tmp_path, steps=steps)
    p['replay_buffer_writer_node']['output_dir'] = str(small_disk / 'replay_buffer')
    r = run_with_faults(p, 1, str(tmp_path), chaos)
    log = ''.join(r['logs']['writer'])
    assert 'No space left on device' in log and 'resuming intake' in log  # clear error, then recovery
    assert state['stalled'] and state['writer_alive'] and r['exit_codes']['writer'] == 0  # the node stayed up
    out = tmp_path / 'audit'
    (out / 'replay_buffer').mkdir(parents=True)
    import shutil
    for f in (small_disk / 'replay_buffer').iterdir():
        shutil.copy(f, out / 'replay_buffer' / f.name)
    assert not list((small_disk / 'replay_buffer').glob('.*.tmp'))  # no partial files
    lost, dup, stored = audit(out, expected_keys(steps, 10))
    assert (lost, dup, stored) == (0, 0, steps * 10)


def test_slow_writer_backpressure_keeps_memory_bounded(tmp_path):
    import psutil
    samples = {'policy': [], 'collector': []}

    def chaos(ctl):
        ctl.wait_stat('env_0', 'chunks', 10)  # past start-up (imports), into steady collection
        for _ in range(30):
            for name in samples:
                try:
                    samples[name].append(psutil.Process(ctl.procs[name].pid).memory_info().rss / 2 ** 20)
                except psutil.Error:
                    pass
            time.sleep(0.5)

    steps = 8
    p = params(tmp_path, steps=steps)
    p['replay_buffer_writer_node'].update(max_pending_writes=1)
    p['policy_node'].update(max_unacked_keys=10)  # one step's keys: the next step waits for the slow disk
    r = run_with_faults(p, 1, str(tmp_path), chaos, drain_timeout_s=180, slow_disk_s=1.5)
    policy_log = ''.join(r['logs']['policy'])
    held = int(policy_log.split("'held': ")[1].split(',')[0])
    growth = {k: max(v) - v[0] for k, v in samples.items() if v}
    print(f'\nrequests held back by backpressure: {held}; RSS growth MB: {growth}')
    assert held > 0  # the producer was slowed down instead of buffering without bound
    assert all(g < 50 for g in growth.values()), growth
    lost, dup, stored = audit(tmp_path, expected_keys(steps, 10))
    assert (lost, dup, stored) == (0, 0, steps * 10)
