"""The learning loop over real DDS (`run sim_train`): env node -> policy node -> collector ->
writer and learner; each step is rolled out by the weights of the previous step's update,
that version is in every stored sample, the same run in one process (`--in-process`) ends
with the same weights, a learner SIGKILLed and restarted catches up from the writer's buffer,
two learner ranks keep identical weights (asynchronous, REINFORCE++), and a warm start clones
the pipeline's expert recordings."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from rl_traj_ros.policies.actor_critic import ActorCritic
from rl_traj_ros.storage.files import load_trajectory

from rosutil import ROOT

METRICS = {'policy_loss', 'value_loss', 'entropy', 'approx_kl', 'clip_fraction', 'explained_variance',
           'samples_per_s', 'version_lag_max', 'success_rate', 'episodes', 'reward_per_step'}


def _cli(*args, timeout=300):
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', *args, '--quiet'], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def _model(path):
    return torch.load(path, weights_only=True)['model']


def _stored_by_step(run):
    index = json.loads((run / 'replay_buffer' / 'trajectory_index.json').read_text())
    out = {}
    for tid, e in index['trajectories'].items():
        ident = e['identity']
        out[(ident['step_id'], ident['actor_rank'])] = load_trajectory(
            run / 'replay_buffer' / f'trajectory_{int(tid):08d}.pt', 'pt')
    return out


@pytest.fixture(scope='module')
def dds_run(tmp_path_factory):
    out = tmp_path_factory.mktemp('sim_train')
    _cli('sim_train', '--steps', '3', '--output-dir', str(out), '--eval-episodes', '4')
    return out


def test_sim_train_updates_every_step_and_the_versions_are_in_the_data(dds_run):
    lines = [json.loads(x) for x in (dds_run / 'metrics.jsonl').read_text().splitlines()]
    assert [m['step'] for m in lines] == [0, 1, 2] and [m['version'] for m in lines] == [1, 2, 3]
    assert all(METRICS <= set(m) for m in lines) and all(m['version_lag_max'] == 0 for m in lines)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(dds_run / 'tensorboard'))
    events.Reload()
    assert [e.step for e in events.Scalars('learner/policy_loss')] == [0, 1, 2]
    assert {'learner/success_rate', 'learner/approx_kl', 'learner/samples_per_s'} <= set(events.Tags()['scalars'])
    from PIL import Image
    assert Image.open(dds_run / 'learning_curve.png').size == (1040, 870)  # 2 x 3 panels (learning_curve.PANELS)
    ckpt = torch.load(dds_run / 'learner' / 'learner_checkpoint.pt', weights_only=True)
    assert ckpt['version'] == 3 and ckpt['trained_steps'] == [0, 1, 2]
    by_step = {s: d for (s, _), d in _stored_by_step(dds_run).items()}
    assert sorted(by_step) == [0, 1, 2]
    init = ActorCritic(21, 7, 4, hidden=64, seed=0)  # the policy node's seeded model: version 0
    for step, d in by_step.items():
        assert d['versions'].unique().tolist() == [step]  # synchronous: step s by update s's weights
        with torch.no_grad():
            v0 = init.values({'states': d['curr_obs/states']})
        same = torch.allclose(v0, d['prev_values'], atol=1e-5)
        assert same == (step == 0), f'step {step}: values {"match" if same else "differ from"} the initial model'
    ev = json.loads((dds_run / 'eval.json').read_text())  # --eval-episodes: the final weights on held-out ids
    assert ev['version'] == 3 and ev['episodes'] == 4 and min(ev['state_ids']) >= 4096  # past the 4096 train ids


def test_the_same_run_in_process_ends_with_the_same_weights_and_versions(dds_run, tmp_path):
    _cli('sim_train', '--steps', '3', '--output-dir', str(tmp_path), '--in-process')
    a, b = _model(dds_run / 'learner' / 'learner_checkpoint.pt'), _model(tmp_path / 'learner' / 'learner_checkpoint.pt')
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    print(f'DDS vs in-process after 3 updates: max weight difference {worst:.3g}')
    assert worst < 1e-5
    init = ActorCritic(21, 7, 4, hidden=64, seed=0).state_dict()
    assert max(float((a[k] - init[k]).abs().max()) for k in a) > 1e-3  # and they did move
    dds, local = _stored_by_step(dds_run), _stored_by_step(tmp_path)
    assert sorted(dds) == sorted(local)
    for k in dds:
        assert torch.equal(dds[k]['versions'], local[k]['versions'])
        assert torch.allclose(dds[k]['actions'], local[k]['actions'], atol=1e-5)
    # and the held-out evaluation of a run's checkpoint from the CLI
    out = _cli('sim_eval', '--checkpoint', str(tmp_path / 'learner'), '--eval-episodes', '4')
    ev = json.loads((tmp_path / 'eval.json').read_text())
    assert 'held-out' in out and ev['version'] == 3 and ev['episodes'] == 4
    # a second run into the same directory continues: steps 3, 4 by versions 3, 4 (still synchronous)
    _cli('sim_train', '--steps', '2', '--output-dir', str(tmp_path), '--in-process')
    lines = [json.loads(x) for x in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
    assert [(m['step'], m['version']) for m in lines] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    more = _stored_by_step(tmp_path)
    assert sorted(more) == [(s, 0) for s in range(5)]
    assert [more[(s, 0)]['versions'].unique().tolist() for s in (3, 4)] == [[3], [4]]


def _learner(run, ckpt, topic_prefix='/catch_up_test'):
    """A learner node with the run's parameters, its own checkpoint dir, nothing live on its topic:
    it can only learn from what the writer stored."""
    return subprocess.Popen(
        [sys.executable, '-m', 'rl_traj_ros.nodes.learner_node', '--ros-args',
         '--params-file', str(run / 'params.yaml'),
         '-p', f'checkpoint_dir:={ckpt}', '-p', f'metrics_dir:={ckpt}', '-p', "tensorboard_dir:=''",
         '-p', f'weights_dir:={ckpt}', '-p', f'topic_prefix:={topic_prefix}', '-p', 'num_updates:=3'],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_a_sigkilled_learner_restarts_from_its_checkpoint_and_catches_up_from_the_buffer(dds_run, tmp_path):
    p = _learner(dds_run, tmp_path)
    seen = []
    for line in p.stdout:
        seen.append(line)
        if 'update 1 ' in line:
            os.killpg(p.pid, signal.SIGKILL)  # mid-run: right after its first update
            break
    p.wait(30)
    assert p.returncode == -signal.SIGKILL, ''.join(seen)
    before = torch.load(tmp_path / 'learner_checkpoint.pt', weights_only=True)['version']
    t0 = time.monotonic()
    p = _learner(dds_run, tmp_path)
    log, _ = p.communicate(timeout=120)
    assert p.returncode == 0, log
    assert 'resumed from' in log and 'catching up from the replay buffer' in log
    ckpt = torch.load(tmp_path / 'learner_checkpoint.pt', weights_only=True)
    print(f'killed at version {before}, restarted: version {ckpt["version"]} in {time.monotonic() - t0:.1f} s')
    assert ckpt['version'] == 3 and ckpt['trained_steps'] == [0, 1, 2]
    ref = _model(dds_run / 'learner' / 'learner_checkpoint.pt')
    assert max(float((ckpt['model'][k] - ref[k]).abs().max()) for k in ref) < 1e-5  # no step lost or repeated


def test_two_learner_ranks_in_asynchronous_mode_with_reinforce_pp(tmp_path):
    """2 learner ranks (the collector routes each its rows) with max_version_lag 1 (policy node and
    learners) and REINFORCE++: the ranks end every update with identical weights, a step may be
    rolled out by the weights one update behind, and each rank reports the lag it saw."""
    import yaml
    cfg = yaml.safe_load((ROOT / 'config' / 'sim_train.yaml').read_text())
    cfg['/**/policy_node']['ros__parameters']['max_version_lag'] = 1
    cfg['/**/learner_node']['ros__parameters'].update(max_version_lag=1, advantage='reinforce++')
    (tmp_path / 'async.yaml').write_text(yaml.safe_dump(cfg))
    run = tmp_path / 'run'
    _cli('sim_train', '--config', str(tmp_path / 'async.yaml'), '--steps', '4', '--num-learners', '2',
         '--output-dir', str(run))
    r0, r1 = (torch.load(run / 'learner' / f'rank_{r}' / 'learner_checkpoint.pt', weights_only=True) for r in (0, 1))
    assert r0['version'] == r1['version'] == 4
    assert all(torch.equal(r0['model'][k], r1['model'][k]) for k in r0['model'])
    assert r0['counters']['stale_rows_dropped'] == 0  # the policy node never ran further behind than the lag
    stored = _stored_by_step(run)
    assert sorted(stored) == [(s, a) for s in range(4) for a in (0, 1)]  # each step's rows routed to both ranks
    for (step, _), d in stored.items():
        versions = d['versions'].unique().tolist()
        assert all(max(step - 1, 0) <= v <= step for v in versions), (step, versions)  # at most one behind
        # and structurally one behind at the step's start: update `step` needs the EnvPart that comes with
        # the step's first request, which the policy node answers at once with the weights it has
        assert step == 0 or min(versions) == step - 1, (step, versions)
    m0 = [json.loads(x) for x in (run / 'metrics.jsonl').read_text().splitlines()]
    m1 = [json.loads(x) for x in (run / 'metrics_rank1.jsonl').read_text().splitlines()]
    assert [m['version'] for m in m0] == [m['version'] for m in m1] == [1, 2, 3, 4]
    assert [m['version_lag_max'] for m in m0] == [m['version_lag_max'] for m in m1] == [0, 1, 1, 1]


def test_warm_start_clones_the_pipelines_expert_demos_then_ppo_continues(tmp_path):
    """The main job's LeRobot episodes (expert) -> behaviour cloning -> version 1, then PPO
    updates from version 2 on; over DDS the learner node announces the clone before step 0."""
    _cli('sim_collect', '--in-process', '--no-images', '--episodes', '4', '--output-dir', str(tmp_path / 'demos'))
    demos = tmp_path / 'demos' / 'collected_data'
    _cli('sim_train', '--steps', '1', '--output-dir', str(tmp_path / 'run'), '--warm-start', str(demos))
    ws = json.loads((tmp_path / 'run' / 'warm_start.json').read_text())
    assert ws['version'] == 1 and ws['bc_episodes'] >= 4 and ws['bc_mse_after'] < 0.5 * ws['bc_mse_before']
    lines = [json.loads(x) for x in (tmp_path / 'run' / 'metrics.jsonl').read_text().splitlines()]
    assert [(m['step'], m['version']) for m in lines] == [(0, 2)]
    stored = _stored_by_step(tmp_path / 'run')
    assert stored[(0, 0)]['versions'].unique().tolist() == [1]  # step 0 rolled out by the clone
