"""End to end: 2 env nodes x 2 envs, 2 epochs x 3 chunks, real DDS between processes; the
replay buffer the pipeline writes equals, tensor for tensor, the in-process run of the same
workers from the same seeds, and every key is stored exactly once."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl_traj_ros.data.schema import TrajectoryKey
from rl_traj_ros.pipelines import sim_collect as sc
from rl_traj_ros.storage.files import load_trajectory

from rosutil import ROOT


def params(tmp, collect=False):
    p = sc.apply_overrides(sc.load_params(sc.DEFAULT_CONFIG), num_env_nodes=2, num_envs=2, steps=1,
                           output_dir=str(tmp), image_obs=False)
    for n in sc.NODES:
        p[n].update(num_epochs=2, chunks_per_epoch=3)
    p['franka_env_node'].update(collect_episodes=collect, export_format='pickle', camera_topic_rate_hz=0.0)
    return p


def stored(directory):
    index = json.loads((Path(directory) / 'trajectory_index.json').read_text())
    return [(index['trajectories'][str(i)], load_trajectory(Path(directory) / f'trajectory_{i:08d}.pt', 'pt'))
            for i in index['trajectory_ids']]


def by_identity(directory):
    """{identity without run_id: (cells, data)} of a stored buffer, and every stored cell."""
    from rl_traj_ros.data.identity import TrajectoryId
    from rl_traj_ros.data.schema import TrajectoryKey
    out, cells = {}, []
    for entry, data in stored(directory):
        ident = TrajectoryId.from_json(entry['identity'])
        mine = ident.cells([TrajectoryKey.from_tuple(k) for k in entry['keys']])
        cells += mine
        out[dataclasses.replace(ident, run_id='')] = (mine, data)
    return out, cells


# every collector configuration the README offers, over real DDS with two env nodes
CONFIGS = {
    'rollout': {},
    'rollout_2_shards': {'num_shards': 2},
    'pipeline_2_actors': {'mode': 'pipeline', 'num_actors': 2},
    'pipeline_micro_batches_shuffled_normalized': {'mode': 'pipeline', 'num_actors': 2, 'micro_batch_size': 1,
                                                   'shuffle_micro_batches': True, 'normalize_advantages': True},
    'lerobot_2_envs_only_success': {'mode': 'lerobot', 'only_success': True},
}


@pytest.mark.parametrize('config', list(CONFIGS))
def test_ros_pipeline_equals_in_process_run(tmp_path, config):
    """Nothing lost, nothing duplicated, identical buffers: the ROS run against the in-process
    run of the same YAML (which takes the writer node's ExactlyOnceSink path)."""
    collect = config == 'rollout'
    pr, pi = params(tmp_path / 'ros', collect=collect), params(tmp_path / 'ref')
    for p in (pr, pi):
        p['trajectory_collector_node'].update(CONFIGS[config])
    r = sc.run_ros(pr, 2, str(tmp_path / 'ros'), quiet=True)
    assert not r['failed'] and all(c in (0, -2) for c in r['exit_codes'].values()), r['exit_codes']
    ref = sc.run_inprocess(pi, 2, str(tmp_path / 'ref'))
    assert r['chunks'] == ref['chunks'] == 12
    col, wr = r['collector'], r['writer']
    assert col['joined'] == 12 and col['rejected'] == 0 and col['pending_keys'] == 0 and col['unacked'] == 0
    assert wr['rejected'] == 0 and wr['duplicates'] == 0 and wr['stored'] == ref['writer']['stored'] > 0
    got, got_cells = by_identity(tmp_path / 'ros' / 'replay_buffer')
    want, want_cells = by_identity(tmp_path / 'ref' / 'replay_buffer')
    assert len(got_cells) == len(set(got_cells))                                 # nothing duplicated
    every = {(TrajectoryKey(0, e, r_, 0, c), b) for r_ in (0, 1) for e in (0, 1) for c in range(3) for b in (0, 1)}
    if CONFIGS[config].get('mode', 'rollout') != 'lerobot':
        assert set(got_cells) == every and col['unsettled_keys'] == 0             # nothing lost
    else:  # stored episodes; the rest were dropped (not successful) or are still open
        assert set(got_cells) <= every and col['unsettled_keys'] == ref['collector']['unsettled_keys']
    assert set(got) == set(want)                                                  # the same trajectories
    for ident, (cells, data) in got.items():
        ref_cells, ref_data = want[ident]
        assert cells == ref_cells and set(data) == set(ref_data)
        for k in data:
            assert torch.equal(data[k], ref_data[k]), (ident, k)
    if collect:  # episodes recorded by the env nodes' CollectEpisode
        pkls = list((tmp_path / 'ros' / 'collected_data').glob('env_*/*.pkl'))
        assert len(pkls) == r['episodes'] > 0


def test_a_second_run_into_the_same_buffer_directory_appends(tmp_path):
    """Step ids repeat across runs: the run id keeps them apart, nothing is counted a duplicate.
    The first run in one process (the writer node's sink and buffer), the second through the
    writer node over DDS, which must adopt the directory the first left."""
    out = tmp_path / 'shared'
    for _ in range(2):
        p = sc.apply_overrides(sc.load_params(sc.DEFAULT_CONFIG), num_env_nodes=1, num_envs=2, steps=1,
                               output_dir=str(out), image_obs=False)
        for n in sc.NODES:
            p[n].update(num_epochs=1, chunks_per_epoch=3)
        p['franka_env_node'].update(collect_episodes=False, camera_topic_rate_hz=0.0)
        p['trajectory_collector_node'].update(num_shards=2)
        r = sc.run_ros(p, 1, str(tmp_path / 'work'), quiet=True) if _ else sc.run_inprocess(p, 1, str(out))
        assert r['writer']['duplicates'] == 0 and r['writer']['stored'] == 2, r['writer']
    index = json.loads((out / 'replay_buffer' / 'trajectory_index.json').read_text())
    runs = {e['identity']['run_id'] for e in index['trajectories'].values()}
    assert len(index['trajectory_ids']) == 4 and len(runs) == 2  # same step ids, two runs, both kept


def test_runner_cli_in_process(tmp_path):
    out = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--in-process', '--no-images',
                          '--episodes', '2', '--output-dir', str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert 'successful (100%)' in out.stdout and 'replay buffer:' in out.stdout
    assert (tmp_path / 'replay_buffer' / 'trajectory_index.json').exists()
    assert (tmp_path / 'collected_data' / 'env_0' / 'meta' / 'info.json').exists()


def test_every_run_gets_its_own_output_dir_and_a_taken_one_is_refused(tmp_path):
    """Running the main job twice must work: the default output is a new timestamped directory
    per run (+ a 'latest' link); an explicit directory that already holds a dataset is refused
    before anything starts, with the reason."""
    cmd = [sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--in-process', '--no-images',
           '--episodes', '1']
    runs = []
    for _ in range(2):
        out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        runs.append(out.stdout.split('[sim_collect] output: ')[1].split()[0])
    root = tmp_path / 'outputs' / 'sim_collect'
    assert runs[0] != runs[1] and (root / 'latest').resolve() == (tmp_path / runs[1]).resolve()
    for r in runs:
        assert (tmp_path / r / 'collected_data' / 'env_0' / 'meta' / 'info.json').exists()
        assert (tmp_path / r / 'replay_buffer' / 'trajectory_index.json').exists()
    again = subprocess.run(cmd + ['--output-dir', runs[0]], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 2 and 'a LeRobot dataset already exists in' in again.stderr


def test_new_run_dir_never_reuses_a_directory(tmp_path):
    from rl_traj_ros.pipelines.run_dir import new_run_dir
    dirs = [new_run_dir(tmp_path) for _ in range(3)]  # same second: suffixed
    assert len(set(dirs)) == 3 and all(d.is_dir() for d in dirs)
    assert (tmp_path / 'latest').resolve() == dirs[-1].resolve()
    from rl_traj_ros.pipelines.run_dir import discard_if_empty
    (dirs[0] / 'demos').mkdir()
    (dirs[0] / 'demos' / 'trajectory_index.json').write_text('{}')
    (dirs[2] / 'collected_data' / 'env_0').mkdir(parents=True)  # a failed run: empty directories only
    assert not discard_if_empty(dirs[0]) and dirs[0].is_dir()  # holds a file: kept
    assert discard_if_empty(dirs[2]) and not dirs[2].exists()
    assert (tmp_path / 'latest').resolve() == dirs[1].resolve()  # back to the newest run left


TELEOP = r'''
import sys, time, rclpy
from rl_traj_ros import msg as M
from rl_traj_ros.ros.qos import TELEOP_QOS
from rl_traj_ros.ros.run_link import RunLink
rclpy.init()
n = rclpy.create_node("fake_teleop")
pub = RunLink(n, {"run_id": sys.argv[1], "secret_file": sys.argv[2]}).publisher(M.Intervention, "/rl_traj/intervention",
                                                                            TELEOP_QOS)  # a device of the run
print("ready", flush=True)
while True:
    m = M.Intervention(source_device="test", env_index=-1, action=[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5], active=True)
    m.header.stamp = n.get_clock().now().to_msg()
    pub.publish(m)
    time.sleep(0.01)
'''


def test_interventions_replace_actions_and_are_recorded(tmp_path):
    from rosutil import ros_process
    p = sc.apply_overrides(sc.load_params(sc.DEFAULT_CONFIG), num_env_nodes=1, num_envs=2, steps=1,
                           output_dir=str(tmp_path), image_obs=False)
    for n in sc.NODES:
        p[n].update(num_epochs=1, chunks_per_epoch=4)
    # require_teleop: no chunk before the teleop publisher is discovered, however loaded the machine
    p['franka_env_node'].update(collect_episodes=False, camera_topic_rate_hz=0.0, require_teleop=True)
    from rl_traj_ros.delivery.run_guard import new_secret_file
    key = new_secret_file('teleop-run', str(tmp_path / 'keys'))
    for n in sc.NODES:   # the run the device joins
        p[n].update(run_id='teleop-run', secret_file=key)
    with ros_process(['-c', TELEOP, 'teleop-run', key]):
        r = sc.run_ros(p, 1, str(tmp_path), quiet=True)
    assert not r['failed']
    (entry, data), = stored(tmp_path / 'replay_buffer')
    flags = data['intervene_flags'].bool()
    assert flags.any(), 'no intervention was applied'
    expert = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5]).repeat(4)  # C=4 slots
    rows = flags.reshape(-1, 28).all(1)
    assert torch.allclose(data['actions'].reshape(-1, 28)[rows], expert.expand(int(rows.sum()), 28))


def test_no_node_outlives_a_killed_runner(tmp_path):
    """SIGKILL on `run sim_collect` (a crash, a harness's timeout) cannot flush anything, but its
    nodes must not go on publishing into the next run's topics or drive a robot: each gets SIGINT
    from the kernel and ends."""
    import os
    import signal
    import time
    runner = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--no-images',
                               '--episodes', '100000', '--output-dir', str(tmp_path / 'out'), '--quiet'], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def descendants(pid):  # through every thread (a node is forked by one of them): its node fork server, its nodes
        out = []
        for task in Path(f'/proc/{pid}/task').glob('*'):
            try:
                kids = [int(x) for x in (task / 'children').read_text().split()]
            except (FileNotFoundError, ProcessLookupError):  # the thread or process ended while being read
                continue
            for kid in kids:
                out += [kid, *descendants(kid)]
        return out

    def alive(pid):
        try:
            return Path(f'/proc/{pid}/stat').read_text().split(')')[1].split()[0] != 'Z'
        except (FileNotFoundError, ProcessLookupError):  # gone, or reaped between open and read (ESRCH)
            return False
    env_log = tmp_path / 'out' / 'node_logs' / 'env_0.log'
    deadline = time.monotonic() + 120  # every node past its start-up lines: quiet, as in a long run
    while time.monotonic() < deadline and 'activated' not in (env_log.read_text() if env_log.exists() else ''):
        time.sleep(0.2)
    time.sleep(3.0)
    nodes = descendants(runner.pid)
    assert len(nodes) >= 4, f'the runner started {nodes}'  # writer, collector, policy, env (and their server)
    runner.kill()
    runner.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(alive(p) for p in nodes):
        time.sleep(0.2)
    left = [p for p in nodes if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f'nodes {left} still running 60 s after their runner was killed'


def test_ctrl_c_on_the_runner_stops_every_node_and_exits_0(tmp_path):
    """A terminal Ctrl-C on `run sim_collect` (SIGINT, and a second one 10 ms later): the run
    ends as at its normal end, every node stopped and flushed, no traceback, exit 0, and what
    was stored loads."""
    import signal
    import time
    from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
    out = tmp_path / 'out'
    runner = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--no-images',
                               '--episodes', '100000', '--output-dir', str(out), '--quiet'], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        env_log = out / 'node_logs' / 'env_0.log'
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and 'chunks=10 ' not in (env_log.read_text() if env_log.exists() else ''):
            time.sleep(0.2)
        runner.send_signal(signal.SIGINT)
        time.sleep(0.01)
        runner.send_signal(signal.SIGINT)
        log, _ = runner.communicate(timeout=90)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode == 0, log[-3000:]
    assert 'interrupted (SIGINT): every node stopped and flushed' in log and 'Traceback' not in log, log[-3000:]
    for name in ('writer', 'collector', 'policy', 'env_0'):
        assert 'SIGINT: stopping' in (out / 'node_logs' / f'{name}.log').read_text(), name
    buf = TrajectoryReplayBuffer(sample_window_size=0)
    buf.load_checkpoint(str(out / 'replay_buffer'))
    assert len(buf) >= 1
