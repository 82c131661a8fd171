"""The learning loop over real DDS (`run sim_train`): env node -> policy node -> collector ->
writer and learner; each step is rolled out by the weights of the previous step's update,
and that version is in every stored sample."""
import json
import subprocess
import sys

import torch

from rl_traj_ros.core.storage import load_trajectory
from rl_traj_ros.policies.actor_critic import ActorCritic

from rosutil import ROOT

METRICS = {'policy_loss', 'value_loss', 'entropy', 'approx_kl', 'clip_fraction', 'explained_variance',
           'samples_per_s', 'version_lag_max', 'success_rate', 'episodes', 'reward_per_step'}


def test_sim_train_updates_every_step_and_the_versions_are_in_the_data(tmp_path):
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_train', '--steps', '3', '--output-dir',
                        str(tmp_path), '--quiet'], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
    assert [m['step'] for m in lines] == [0, 1, 2] and [m['version'] for m in lines] == [1, 2, 3]
    assert all(METRICS <= set(m) for m in lines) and all(m['version_lag_max'] == 0 for m in lines)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(tmp_path / 'tensorboard'))
    events.Reload()
    assert [e.step for e in events.Scalars('learner/policy_loss')] == [0, 1, 2]
    assert {'learner/success_rate', 'learner/approx_kl', 'learner/samples_per_s'} <= set(events.Tags()['scalars'])
    from PIL import Image
    assert Image.open(tmp_path / 'learning_curve.png').size == (720, 440)
    ckpt = torch.load(tmp_path / 'learner' / 'learner_checkpoint.pt', weights_only=True)
    assert ckpt['version'] == 3 and ckpt['trained_steps'] == [0, 1, 2]
    index = json.loads((tmp_path / 'replay_buffer' / 'trajectory_index.json').read_text())
    by_step = {}
    for tid, e in index['trajectories'].items():
        by_step[e['identity']['step_id']] = load_trajectory(
            tmp_path / 'replay_buffer' / f'trajectory_{int(tid):08d}.pt', 'pt')
    assert sorted(by_step) == [0, 1, 2]
    init = ActorCritic(21, 7, 4, hidden=64, seed=0)  # the policy node's seeded model: version 0
    for step, d in by_step.items():
        assert d['versions'].unique().tolist() == [step]  # synchronous: step s by update s's weights
        with torch.no_grad():
            v0 = init.values({'states': d['curr_obs/states']})
        same = torch.allclose(v0, d['prev_values'], atol=1e-5)
        assert same == (step == 0), f'step {step}: values {"match" if same else "differ from"} the initial model'
