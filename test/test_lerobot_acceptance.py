"""Opt-in (RL_TRAJ_ROS_LEROBOT=1): the real lerobot 0.6.1 loads what we wrote, frame for frame.

Needs the lerobot venv (Python 3.12, ~2.2 GB; `bash tools/lerobot_venv.sh` makes it), so it
is not part of the default suite. README: `RL_TRAJ_ROS_LEROBOT=1 bash tools/test.sh -k acceptance`.
"""
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from rl_traj_ros.core.episodes import CollectEpisode

from episode_envs import ScriptedEnv
from rosutil import ROOT

pytestmark = pytest.mark.skipif(os.environ.get('RL_TRAJ_ROS_LEROBOT') != '1',
                                reason='opt-in: set RL_TRAJ_ROS_LEROBOT=1 (needs the lerobot 0.6.1 venv)')


def write_dataset(root, version):
    fns = [lambda i=i: ScriptedEnv(i, (5, 3, 4), ('success', 'fail', 'trunc'), hw=32) for i in range(3)]
    venv = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    env = CollectEpisode(venv, str(root / 'ds'), num_envs=3, export_format='lerobot', lerobot_version=version,
                         finalize_interval=3)
    env.writer.truth_dir = root / 'truth'
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        env.step(rng.uniform(-1, 1, (3, 7)).astype(np.float32))
    env.close()
    return env.episodes_saved


@pytest.mark.parametrize('version', ['v3.0', 'v2.1'])
def test_real_lerobot_loads_every_frame(tmp_path, version):
    venv = subprocess.run(['bash', str(ROOT / 'tools' / 'lerobot_venv.sh')], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    assert write_dataset(tmp_path, version) >= 6
    cmd = [f'{venv}/bin/python', str(ROOT / 'tools' / 'lerobot_accept.py'), str(tmp_path / 'ds'),
           str(tmp_path / 'truth')] + (['--convert-v21'] if version == 'v2.1' else [])
    env = {**os.environ, 'HF_HUB_OFFLINE': '1', 'HF_HOME': str(tmp_path / 'hf'), 'PYTHONPATH': ''}
    env.pop('_ROS_WHEELS_BOOTSTRAP_COMPLETE', None)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
    assert r.returncode == 0 and 'PASS' in r.stdout
