"""End to end: 2 env nodes x 2 envs, 2 epochs x 3 chunks, real DDS between processes; the
replay buffer the pipeline writes equals, tensor for tensor, the in-process run of the same
workers from the same seeds, and every key is stored exactly once."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl_traj_ros.core.storage import load_trajectory
from rl_traj_ros.pipelines import sim_collect as sc

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


def test_ros_pipeline_equals_in_process_run(tmp_path):
    r = sc.run_ros(params(tmp_path / 'ros', collect=True), 2, str(tmp_path / 'ros'), quiet=True)
    assert not r['failed'] and all(c in (0, -2) for c in r['exit_codes'].values()), r['exit_codes']
    ref = sc.run_inprocess(params(tmp_path / 'ref'), 2, str(tmp_path / 'ref'))
    assert r['chunks'] == ref['chunks'] == 12
    assert r['collector']['joined'] == 12 and r['collector']['rejected'] == 0 and r['collector']['pending_keys'] == 0
    got, want = stored(tmp_path / 'ros' / 'replay_buffer'), stored(tmp_path / 'ref' / 'replay_buffer')
    assert len(got) == len(want) == 2  # one Trajectory per source and step
    keys = [tuple(k) for entry, _ in got for k in entry['keys']]
    expected = {(0, e, r_, 0, c) for r_ in (0, 1) for e in (0, 1) for c in range(3)}
    assert len(keys) == len(set(keys)) == 12 and set(keys) == expected  # every key exactly once
    by_keys = {tuple(map(tuple, e['keys'])): d for e, d in want}
    for entry, data in got:
        ref_data = by_keys[tuple(map(tuple, entry['keys']))]
        assert set(data) == set(ref_data)
        for k in data:
            assert torch.equal(data[k], ref_data[k]), k
    # episodes recorded by the env nodes' CollectEpisode
    pkls = list((tmp_path / 'ros' / 'collected_data').glob('env_*/*.pkl'))
    assert len(pkls) == r['episodes'] > 0


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


@pytest.mark.skipif(importlib.util.find_spec('launch') is None or importlib.util.find_spec('launch_ros') is None,
                    reason='launch/launch_ros are not installed here (they are on a ROS 2 workstation)')
def test_launch_file_describes_the_pipeline():
    spec = importlib.util.spec_from_file_location('sim_collect_launch', ROOT / 'launch' / 'sim_collect.launch.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ld = mod.generate_launch_description()
    from launch import LaunchDescription
    assert isinstance(ld, LaunchDescription) and len(ld.entities) >= 5


TELEOP = r'''
import time, rclpy
from rl_traj_ros import msg as M
from rl_traj_ros.ros.qos import TELEOP_QOS
rclpy.init()
n = rclpy.create_node("fake_teleop")
pub = n.create_publisher(M.Intervention, "/rl_traj/intervention", TELEOP_QOS)
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
    p['franka_env_node'].update(collect_episodes=False, camera_topic_rate_hz=0.0)
    with ros_process(['-c', TELEOP]):
        r = sc.run_ros(p, 1, str(tmp_path), quiet=True)
    assert not r['failed']
    (entry, data), = stored(tmp_path / 'replay_buffer')
    flags = data['intervene_flags'].bool()
    assert flags.any(), 'no intervention was applied'
    expert = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5]).repeat(4)  # C=4 slots
    rows = flags.reshape(-1, 28).all(1)
    assert torch.allclose(data['actions'].reshape(-1, 28)[rows], expert.expand(int(rows.sum()), 28))
