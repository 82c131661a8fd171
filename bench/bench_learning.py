"""The loop learns: held-out success rate against wall time, the ROS 2 loop vs stable-baselines3.

Task: reach the cube (``task_id`` 1: the pinch point within 2 cm, 50-step episodes, dense
reward -distance, +1 on success), state only, every episode from its own training state id;
scored on held-out state ids (the table's eval split) with the mean action, 20 episodes per
snapshot, by one evaluator (``rl_traj_ros/rollout/evaluate.py``) for both.
  - ROS: ``run sim_train --config config/sim_train_reach.yaml --num-env-nodes 2`` (2 env nodes
    x 2 envs, one per core; policy node, collector, writer, learner node over DDS; synchronous
    PPO; weights snapshot every 2 versions), stopped with SIGINT when the budget is spent; wall time from the command's start
    (node start-up included);
  - anchor, same run, same wall budget: stable-baselines3 PPO ('MlpPolicy') on the same task as a
    gymnasium env (``GymSimFranka``), tuned (``SB3_TUNED``: VecNormalize of observations and
    rewards, n_steps 512, batch 64, 10 epochs, gamma 0.98, 2 SubprocVecEnv envs; ``--anchor
    defaults|both`` for SB3's defaults, 2 envs in one process), snapshots of its policy (and
    observation normalizer) every ``--snapshot-s`` s.
Reported: each snapshot's held-out success, the first wall time each reaches its best, and
both curves in a PNG (``--out``).

``--task pick``, the harder target: pick up and lift the cube (gym-hil's sparse reward),
``config/sim_train_pick.yaml``, warm-started by behaviour cloning on ``--demos`` expert episodes
recorded first by the pipeline itself (``run sim_collect --in-process --no-images``, not counted
in the budget); the curve starts at the clone (version 1). No anchor: from scratch neither PPO
sees a reward within minutes.

    bash -c 'source env.sh && python bench/bench_learning.py [--budget-s 180] [--anchor both] [--out bench_learning.png]'
    bash -c 'source env.sh && python bench/bench_learning.py --task pick [--demos 100]'
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rl_traj_ros.pipelines.sim_collect import load_params  # noqa: E402
from rl_traj_ros.pipelines.sim_train import TRAIN_NODES  # noqa: E402
from rl_traj_ros.rollout.evaluate import actor_critic_act, evaluate  # noqa: E402

CONFIGS = {'reach': ROOT / 'config' / 'sim_train_reach.yaml', 'pick': ROOT / 'config' / 'sim_train_pick.yaml'}


def spread(items: list, n: int) -> list:
    """At most ``n`` items, evenly spaced, always the last."""
    if len(items) <= n:
        return items
    idx = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in idx]


def overridden(config: Path, sets: list[str], dst: Path) -> Path:
    """``config`` with ``NODE.KEY=VALUE`` overrides (YAML values; NODE '**' for every node)."""
    if not sets:
        return config
    import yaml
    c = yaml.safe_load(config.read_text())
    for item in sets:
        name, value = item.split('=', 1)
        node, key = name.split('.', 1)
        c.setdefault('/**' if node == '**' else f'/**/{node}', {}).setdefault('ros__parameters', {})[key] = \
            yaml.safe_load(value)
    dst.write_text(yaml.safe_dump(c, sort_keys=False))
    return dst


def run_ros(budget_s: float, out: Path, chunk: int, config: Path,
            warm_start: Optional[Path] = None, num_env_nodes: int = 1) -> tuple[list[tuple[float, dict]], dict]:
    t0 = time.time()
    extra = ['--warm-start', str(warm_start)] if warm_start else []
    p = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_train', '--config', str(config),
                          '--steps', '100000', '--output-dir', str(out), '--quiet', '--num-env-nodes',
                          str(num_env_nodes), *extra], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        p.wait(budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGINT)
        p.wait(120)
    lines = [json.loads(x) for x in (out / 'metrics.jsonl').read_text().splitlines()]
    when = {int(m['version']): m['time'] - t0 for m in lines}
    if (out / 'warm_start.json').exists():  # the clone, before the first update
        ws = json.loads((out / 'warm_start.json').read_text())
        when[int(ws['version'])] = ws['time'] - t0
    steps_at, total = {}, 0   # env steps the versions up to v were trained on
    for m in sorted(lines, key=lambda m: m['version']):
        total += m.get('samples', 0) * chunk
        steps_at[int(m['version'])] = total
    snaps = []   # (wall time, weights, env steps)
    for f in sorted((out / 'weights').glob('policy_v*.pt')):
        v = int(f.stem.split('_v')[1])
        if v in when and when[v] <= budget_s:
            snaps.append((when[v], torch.load(f, weights_only=True), steps_at.get(v, 0)))
    samples = sum(m.get('samples', 0) for m in lines if m['time'] - t0 <= budget_s)
    return snaps, {'updates': sum(1 for m in lines if m['time'] - t0 <= budget_s), 'env_steps': samples * chunk}


# The anchor's strongest reasonable configuration for this task (rl-zoo style for short dense-reward
# tasks): observations and rewards normalized, 512-step rollouts, minibatches of 64, 10 epochs,
# gamma 0.98, 2 envs in subprocesses. ``--anchor defaults`` adds SB3 with its defaults beside it.
SB3_TUNED = {'n_steps': 512, 'batch_size': 64, 'n_epochs': 10, 'gamma': 0.98}


def run_sb3(budget_s: float, snapshot_s: float, seed: int = 0, tuned: bool = True):
    """SB3 PPO on ``GymSimFranka``: snapshots of (policy weights, observation normalizer) in time."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    from rl_traj_ros.envs.sim_franka import GymSimFranka
    fns = [lambda i=i: GymSimFranka(i, 2, task_id=1, max_episode_steps=50, seed=seed) for i in range(2)]
    if tuned:
        venv = VecNormalize(SubprocVecEnv(fns), norm_obs=True, norm_reward=True, gamma=SB3_TUNED['gamma'])
        model = PPO('MlpPolicy', venv, seed=seed, verbose=0, device='cpu', **SB3_TUNED)
    else:
        venv = DummyVecEnv(fns)
        model = PPO('MlpPolicy', venv, seed=seed, verbose=0, device='cpu')
    snaps: list[tuple[float, dict, object]] = []

    def normalizer():
        return copy.deepcopy(venv.obs_rms) if tuned else None

    class Snap(BaseCallback):
        def _on_training_start(self) -> None:
            self.t0, self.next = time.time(), 0.0

        def _on_step(self) -> bool:
            t = time.time() - self.t0
            if t >= self.next:
                snaps.append((t, copy.deepcopy(self.model.policy.state_dict()), normalizer()))
                self.next = t + snapshot_s
            return t < budget_s
    t0 = time.time()
    model.learn(total_timesteps=10 ** 8, callback=Snap())
    snaps.append((time.time() - t0, copy.deepcopy(model.policy.state_dict()), normalizer()))
    steps = model.num_timesteps
    clip = venv.clip_obs if tuned else None
    venv.close()
    return snaps, {'env_steps': steps}, model, clip


def sb3_act(model, obs_rms, clip):
    """The deterministic action on held-out states, normalized as the snapshot's VecNormalize did."""
    def act(obs):
        s = obs['states']
        if obs_rms is not None:
            s = np.clip((s - obs_rms.mean) / np.sqrt(obs_rms.var + 1e-8), -clip, clip).astype(np.float32)
        return model.predict(s, deterministic=True)[0]
    return act


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--budget-s', type=float, default=150.0)
    ap.add_argument('--snapshot-s', type=float, default=15.0)
    ap.add_argument('--eval-episodes', type=int, default=20)
    ap.add_argument('--max-snapshots', type=int, default=8)
    ap.add_argument('--out', default='bench_learning.png')
    ap.add_argument('--task', choices=sorted(CONFIGS), default='reach')
    ap.add_argument('--demos', type=int, default=100, help='pick: expert episodes to clone first')
    ap.add_argument('--anchor', choices=['tuned', 'defaults', 'both'], default='tuned',
                    help='reach: the stable-baselines3 PPO beside the ROS loop (tuned: its strongest configuration)')
    ap.add_argument('--set', action='append', default=[], metavar='NODE.KEY=VALUE',
                    help="override a parameter of the task's config (YAML value; NODE '**': every node), e.g. "
                         'policy_node.max_version_lag=1 (asynchronous PPO)')
    ap.add_argument('--num-env-nodes', type=int, default=None,
                    help='env nodes of the ROS loop (num_envs each; default: reach 2, one per core, pick 1)')
    args = ap.parse_args()
    args.num_env_nodes = args.num_env_nodes or (2 if args.task == 'reach' else 1)
    torch.set_num_threads(1)
    tmp_cfg = tempfile.TemporaryDirectory()
    config = overridden(CONFIGS[args.task], args.set, Path(tmp_cfg.name) / 'config.yaml')
    p = load_params(config, TRAIN_NODES)
    env_p, pol = p['franka_env_node'], p['policy_node']
    eval_env = {**env_p, 'num_envs': 2}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        demos = None
        if args.task == 'pick':
            t = time.time()
            subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--in-process',
                            '--no-images', '--episodes', str(args.demos), '--output-dir', str(Path(tmp) / 'demos')],
                           cwd=ROOT, check=True, capture_output=True)
            demos = Path(tmp) / 'demos' / 'collected_data'
            print(f'{args.demos} expert demos recorded in {time.time() - t:.0f} s (not in the budget)')
        snaps, info = run_ros(args.budget_s, Path(tmp) / 'ros', env_p['chunk'], config, demos, args.num_env_nodes)
        from rl_traj_ros.policies.actor_critic import ActorCritic
        model = ActorCritic(pol['state_dim'], env_p['action_dim'], env_p['chunk'], pol['hidden'], seed=0)
        curve = [(0.0, 0.0)] if demos is None else []
        for t, sd, _ in spread(snaps, args.max_snapshots):
            model.load_state_dict(sd)
            r = evaluate(actor_critic_act(model.eval()), eval_env, args.eval_episodes, env_p['chunk'])
            curve.append((t, r['success_rate']))
        name = 'ROS 2 loop (run sim_train' + ''.join(f', {x}' for x in args.set) + \
            (f', {args.num_env_nodes} env nodes' if args.num_env_nodes > 1 else '') + ')'
        results[name + (', warm start' if demos else '')] = (curve, info)
    if args.task == 'pick':
        report(results, args)
        return
    for tuned in ([True, False] if args.anchor == 'both' else [args.anchor == 'tuned']):
        snaps, info, sb3, clip = run_sb3(args.budget_s, args.snapshot_s, tuned=tuned)
        curve = []
        for t, sd, obs_rms in spread(snaps, args.max_snapshots):
            sb3.policy.load_state_dict(sd)
            r = evaluate(sb3_act(sb3, obs_rms, clip), eval_env, args.eval_episodes, 1)
            curve.append((t, r['success_rate']))
        name = ('stable-baselines3 PPO, tuned (VecNormalize, n_steps 512, batch 64, 10 epochs, gamma 0.98, '
                '2 subprocess envs)' if tuned else 'stable-baselines3 PPO, defaults')
        results[name] = (curve, info)
    report(results, args)


def report(results: dict, args) -> None:
    print(f'{args.task} the cube, held-out success ({args.eval_episodes} episodes per point) against wall time, '
          f'budget {args.budget_s:.0f} s each, torch threads {torch.get_num_threads()}')
    for name, (curve, info) in results.items():
        best = max(s for _, s in curve)
        first = min(t for t, s in curve if s == best)
        print(f'  {name}: ' + ', '.join(f'{t:.0f}s {s:.0%}' for t, s in curve))
        print(f'    best {best:.0%} first at {first:.0f} s; {info}')
    plot(results, args.out)
    print(f'curve: {args.out}')


def plot(results: dict, out: str) -> None:
    from rl_traj_ros.viz.curves import plot_curves
    plot_curves({name: curve for name, (curve, _) in results.items()}, out,
                'held-out success against wall time (same run, same budget)', 'wall time (s)',
                'held-out success', percent=True)


if __name__ == '__main__':
    np.set_printoptions(precision=3)
    main()
