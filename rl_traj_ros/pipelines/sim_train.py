"""Sim training: the sim collection pipeline plus a learner node closing the loop (PPO).

    python -m rl_traj_ros.cli run sim_train [--steps N --num-env-nodes K --output-dir D]

Env node(s) -> policy node (the actor-critic, ``max_version_lag`` 0: each step waits for the
weights of the previous step's update) -> collector -> writer and learner; the learner
trains one PPO update per step and publishes the weights with the next model version, which
the policy node stamps into every chunk of the next step. Outputs under the run directory:
``replay_buffer/`` (every stored PolicyPart carries the version that produced it),
``metrics.jsonl`` (one line per update), ``node_logs/``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from ..paths import config_path
from . import sim_collect as sc

DEFAULT_CONFIG = config_path('sim_train.yaml')
DEFAULT_OUTPUT_ROOT = 'outputs/sim_train'
TRAIN_NODES = sc.NODES + ('learner_node',)
SHARED = ('topic_prefix', 'num_envs', 'chunk', 'action_dim', 'seed')


def train_params(config: str | Path, num_env_nodes: int, output_dir: str, steps: Optional[int] = None) -> dict:
    """The nodes' effective parameters: the collection pipeline's (``apply_overrides``) plus the
    learner's, which trains one update per step of every env node's rows."""
    raw = sc.load_params(config, TRAIN_NODES)
    learner = raw.pop('learner_node')
    p = sc.apply_overrides(raw, num_env_nodes, output_dir=output_dir, steps=steps)
    env = p['franka_env_node']
    p['learner_node'] = {**learner, **{k: env[k] for k in SHARED if k in env}, 'num_env_nodes': num_env_nodes,
                         'num_updates': env.get('num_steps', 0), 'metrics_dir': output_dir,
                         'weights_dir': str(Path(output_dir) / 'weights'),
                         'checkpoint_dir': str(Path(output_dir) / 'learner'),
                         'tensorboard_dir': str(Path(output_dir) / 'tensorboard'),
                         'gamma': p['trajectory_collector_node'].get('gamma', 0.99),
                         'gae_lambda': p['trajectory_collector_node'].get('gae_lambda', 0.95),
                         'auto_reset': p['trajectory_collector_node'].get('auto_reset', True)}
    return p


def read_metrics(output_dir: str | Path) -> list[dict]:
    path = Path(output_dir) / 'metrics.jsonl'
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main(args) -> int:
    from .run_dir import new_run_dir
    out = Path(args.output_dir) if args.output_dir else new_run_dir(DEFAULT_OUTPUT_ROOT)
    params = train_params(args.config, args.num_env_nodes, str(out), args.steps)
    print(f'[sim_train] output: {out}', flush=True)
    r = sc.run_ros(params, args.num_env_nodes, str(out), quiet=args.quiet,
                   extra_nodes={'learner': ('learner_node', [])})
    metrics = read_metrics(out)
    for m in metrics:
        print(f"[sim_train] step {m['step']} -> v{m['version']:.0f}: success {m.get('success_rate', 0):.0%} "
              f"({m.get('episodes', 0):.0f} episodes), reward/step {m.get('reward_per_step', 0):.3f}, "
              f"policy loss {m.get('policy_loss', 0):.4f}, value loss {m.get('value_loss', 0):.4f}, "
              f"kl {m.get('approx_kl', 0):.4f}")
    if metrics:
        from ..tools.learning_curve import learning_curve
        learning_curve(out, out / 'learning_curve.png')
    print(f"[sim_train] {len(metrics)} updates; replay buffer: {out / 'replay_buffer'}; metrics: "
          f"{out / 'metrics.jsonl'}, TensorBoard: {out / 'tensorboard'}, curve: {out / 'learning_curve.png'}")
    bad = {n: c for n, c in r['exit_codes'].items() if c not in (0, -2)}
    if bad or r['failed']:
        print(f'[sim_train] FAILED nodes: {bad or r["failed"]}', file=sys.stderr)
        return 1
    return 0
