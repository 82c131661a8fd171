"""Initial-state diversity: the sim resets to state ids of a seeded table, every env and every
episode gets its own state, training and evaluation ids are disjoint, and the main job's
recorded episodes are all distinct."""
import glob
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rl_traj_ros.envs.sim_franka import REACH_STEP_M, SimFrankaVecEnv, sim_env_from_params
from rl_traj_ros.envs.state_ids import StateIdTable

from rosutil import ROOT

CUBE = slice(18, 21)


def test_table_is_reproducible_and_its_splits_are_disjoint():
    a, b = StateIdTable(seed=7, num_train=100, num_eval=20), StateIdTable(seed=7, num_train=100, num_eval=20)
    assert all(a.state(i) == b.state(i) for i in range(120))
    assert StateIdTable(seed=8).state(3) != a.state(3)
    assert set(a.ids('train')).isdisjoint(a.ids('eval')) and len(a.ids('eval')) == 20
    xy = np.array([a.state(i).cube_xy for i in range(120)])
    assert len({tuple(r) for r in xy}) == 120 and (xy >= a.cube_low).all() and (xy <= a.cube_high).all()
    # 3 env nodes x 4 envs, 8 episodes each: 96 episodes, 96 different training ids
    got = [a.scheduled('train', env, ep, 12) for env in range(12) for ep in range(8)]
    assert len(set(got)) == 96 and set(got) <= set(a.ids('train'))
    assert all(a.scheduled('eval', env, 0, 12) in a.ids('eval') for env in range(12))
    with pytest.raises(ValueError, match='outside the table'):
        a.state(120)
    with pytest.raises(ValueError, match='split'):
        a.ids('test')


def test_sim_resets_to_state_ids():
    table = StateIdTable(seed=1, num_train=50, num_eval=10)
    env = SimFrankaVecEnv(2, states=table, env_offset=2, total_envs=4)
    try:
        obs, _ = env.reset()
        assert env.state_ids == [2, 3]
        for i, sid in enumerate(env.state_ids):
            assert np.allclose(obs['states'][i, CUBE][:2], table.state(sid).cube_xy, atol=1e-6)
        obs, _ = env.reset_envs_to_state_ids([55, 51])  # held-out ids, as an evaluation would use
        assert env.state_ids == [55, 51]
        assert np.allclose(obs['states'][0, CUBE][:2], table.state(55).cube_xy, atol=1e-6)
        with pytest.raises(ValueError, match='2 envs'):
            env.reset_envs_to_state_ids([1])
        with pytest.raises(ValueError, match='task id must be in'):
            env.reset_envs_to_state_ids([1, 2], task_ids=[0, 3])
        # task ids: env 1 switches to reaching the cube; a scripted reach succeeds, +1, episode over
        obs, _ = env.reset_envs_to_state_ids([1, 2], task_ids=[0, 1])
        assert obs['task_descriptions'] == ['pick up the cube', 'reach the cube']
        for _ in range(40):
            s = obs['states']
            act = np.zeros((2, 7), np.float32)
            act[1, :3] = np.clip((s[1, CUBE] - s[1, 15:18]) / REACH_STEP_M, -1, 1)
            obs, r, term, trunc, info = env.step(act)
            if term[1]:
                break
        assert term[1] and info['success'][1] and r[1] == 1.0
        assert env.state_ids[1] != 2  # auto-reset to its next state id, still reaching
        assert obs['task_descriptions'][1] == 'reach the cube'
    finally:
        env.close()
    fixed = sim_env_from_params({'num_envs': 2, 'state_split': ''})  # gym-hil's fixed start
    try:
        obs, _ = fixed.reset()
        assert np.allclose(obs['states'][:, CUBE][:, :2], [0.5, 0.0], atol=1e-6)
    finally:
        fixed.close()


def test_the_main_jobs_episodes_are_all_distinct(tmp_path):
    """Tried as a new user would: 2 env nodes x 2 envs, 12 episodes; before the state table
    every episode of an env started alike and the two envs of a node were byte-identical."""
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--in-process', '--no-images',
                        '--num-env-nodes', '2', '--episodes', '12', '--output-dir', str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    episodes = []
    for ds in sorted((tmp_path / 'collected_data').glob('env_*')):
        t = pa.concat_tables([pq.read_table(f) for f in sorted(glob.glob(str(ds / 'data' / '*' / '*.parquet')))])
        states, ep = np.array(t['observation.state'].to_pylist()), np.array(t['episode_index'])
        episodes += [states[ep == e].tobytes() for e in np.unique(ep)]
    assert len(episodes) >= 12 and len(set(episodes)) == len(episodes)


def test_the_reach_task_as_a_gymnasium_env_passes_stable_baselines3s_checker():
    """GymSimFranka, the benchmark anchor's env: the same task and state ids as the env node."""
    from stable_baselines3.common.env_checker import check_env

    from rl_traj_ros.envs.sim_franka import GymSimFranka
    env = GymSimFranka(env_index=1, total_envs=2, task_id=1, max_episode_steps=5)
    try:
        check_env(env, warn=True)
        env.reset()
        assert env.vec.state_ids[0] % 2 == 1  # env 1 of 2 walks the odd training ids
        steps, done = 0, False
        while not done:
            _, r, term, trunc, info = env.step(np.zeros(7, np.float32))
            steps, done = steps + 1, term or trunc
        assert trunc and not term and steps == 5 and r < 0 and not info['is_success']  # held still: cut at 5
    finally:
        env.close()
