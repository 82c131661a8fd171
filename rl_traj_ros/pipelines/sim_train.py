"""Sim training: the sim collection pipeline plus learner node(s) closing the loop (PPO).

    python -m rl_traj_ros.cli run sim_train [--steps N --num-env-nodes K --num-learners R
                                             --eval-episodes M --warm-start DATASETS
                                             --in-process --output-dir D]
    python -m rl_traj_ros.cli run sim_eval --checkpoint D/learner [--eval-episodes M]

Env node(s) -> policy node (the actor-critic, ``max_version_lag`` 0: each step waits for the
weights of the previous step's update) -> collector -> writer and learner; the learner
trains one PPO update per step and publishes the weights with the next model version, which
the policy node stamps into every chunk of the next step. ``--num-learners R`` runs R learner
ranks (the collector in pipeline mode routes each its rows; they all-reduce gradients with
torch.distributed gloo). ``--in-process`` runs the same workers, collector, buffer and
learner in one process without ROS (the reference the DDS run is tested against).
``--eval-episodes M`` scores the final weights on M episodes from held-out state ids;
``--warm-start DIR`` behaviour-clones the actor on the LeRobot datasets under DIR (e.g. the
main job's ``collected_data/``) before the first update.
Outputs under the run directory: ``replay_buffer/`` (every stored PolicyPart carries the
version that produced it), ``metrics.jsonl`` (one line per update), ``learner/`` (the
checkpoint), ``tensorboard/``, ``learning_curve.png``, ``eval.json``, ``node_logs/``.
"""
from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Optional

from ..params.defaults import ENV
from ..params.collector_node import COLLECTOR_NODE
from ..params.paths import config_path
from ..params.spec import resolve
from . import sim_collect as sc

DEFAULT_CONFIG = config_path('sim_train.yaml')
RLPD_CONFIG = config_path('sim_train_rlpd.yaml')
DEFAULT_OUTPUT_ROOT = 'outputs/sim_train'
TRAIN_NODES = sc.NODES + ('learner_node',)
ENV_SHAPE = ('topic_prefix', 'num_envs', 'chunk', 'action_dim', 'seed', 'num_epochs', 'chunks_per_epoch')  # the learner's


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def resume_point(output_dir: str | Path) -> tuple[int, int]:
    """(next step id, updates so far) of a run directory whose learner checkpointed: a new
    ``run sim_train`` into it continues training there (versions and steps go on) instead of
    rolling out steps the checkpoint already trained on; (0, 0) for a new directory."""
    import torch

    from ..learning.base import CHECKPOINT
    learner = Path(output_dir) / 'learner'
    for path in (learner / CHECKPOINT, learner / 'rank_0' / CHECKPOINT):
        if path.exists():
            state = torch.load(path, map_location='cpu', weights_only=True)
            if state.get('algorithm') == 'rlpd':  # off-policy: after the last step the writer stored
                from .real_collect import next_step_id
                return next_step_id(Path(output_dir) / 'replay_buffer'), int(state['version'])
            steps = [int(x) for x in state['trained_steps']]
            return (max(steps) + 1 if steps else 0), int(state['counters'].get('updates', 0))
    return 0, 0


def learner_params(p: dict, learner: dict, output_dir: str | Path, num_env_nodes: int = ENV.num_env_nodes,
                   num_learners: int = 1, done_updates: int = 0) -> dict:
    """The learner node's parameters beside the pipeline's (``p``): the env's shape, where the run's
    outputs go, the writer's buffer to catch up from, the collector's run and return settings."""
    env, col = p['franka_env_node'], p['trajectory_collector_node']
    return {**learner, **{k: env[k] for k in ENV_SHAPE if k in env}, 'num_env_nodes': num_env_nodes,
            # PPO: one update per step, then the learner is done; RLPD trains until stopped
            'num_updates': done_updates + env['num_steps'] if env.get('num_steps') and
            learner.get('algorithm', 'ppo') == 'ppo' else 0,
            'metrics_dir': str(output_dir),
            'weights_dir': str(Path(output_dir) / 'weights'),
            'checkpoint_dir': str(Path(output_dir) / 'learner'),
            'tensorboard_dir': str(Path(output_dir) / 'tensorboard'),
            'replay_buffer_dir': p['replay_buffer_writer_node']['output_dir'],
            'run_id': col['run_id'], 'num_actors': num_learners,
            **{k: resolve(COLLECTOR_NODE, col)[k] for k in ('gamma', 'gae_lambda', 'auto_reset')}}


def train_params(config: str | Path, num_env_nodes: int, output_dir: str, steps: Optional[int] = None,
                 num_learners: int = 1, run_id: Optional[str] = None, warm_start: Optional[str] = None,
                 algo: Optional[str] = None, demos: Optional[str] = None, num_envs: Optional[int] = None) -> dict:
    """The nodes' effective parameters: the collection pipeline's (``apply_overrides``) plus the
    learner's, which trains one update per step of every env node's rows (of its actor rank's
    share with ``num_learners`` > 1: the collector then runs in pipeline mode and routes them).
    Into a directory with a learner checkpoint the run continues from it (``resume_point``).
    ``algo``/``demos`` override the config's learner ``algorithm``/``demos_dir``."""
    raw = sc.load_params(config, TRAIN_NODES)
    learner = raw.pop('learner_node')
    if algo:
        learner['algorithm'] = algo
    if demos:
        learner['demos_dir'] = str(Path(demos).resolve())
    if learner.get('algorithm') == 'rlpd' and raw['policy_node'].get('policy') != 'sac':
        raise ValueError(f"algorithm rlpd trains the 'sac' actor: set the policy node's policy to sac in {config} "
                         '(config/sim_train_rlpd.yaml does)')
    p = sc.apply_overrides(raw, num_env_nodes, num_envs, output_dir=output_dir, steps=steps, run_id=run_id)
    col = p['trajectory_collector_node']
    first_step, done_updates = resume_point(output_dir)
    p['franka_env_node']['start_step'] = first_step
    if num_learners > 1:
        col.update(mode='pipeline', num_actors=num_learners)
        learner['dist_init'] = f'tcp://127.0.0.1:{_free_port()}'
    p['learner_node'] = learner_params(p, learner, output_dir, num_env_nodes, num_learners, done_updates)
    if warm_start:
        p['learner_node']['warm_start_dataset'] = str(warm_start)
    return p


def read_metrics(output_dir: str | Path) -> list[dict]:
    path = Path(output_dir) / 'metrics.jsonl'
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_inprocess(params: dict, num_env_nodes: int, output_dir: str) -> dict:
    """The training run in one process: sim_collect's in-process pipeline with the learner
    wired to the collector's outputs and the policy worker (same seeds, same data, same
    updates as over DDS); metrics.jsonl and the checkpoint as the learner node writes them."""
    from ..learning.loop import LearnerLoop, RunFiles
    from ..params.learner_node import LEARNER_NODE
    from ..params.spec import resolve
    from ..assembly import make_learner
    pl = resolve(LEARNER_NODE, params['learner_node'])
    if pl['num_actors'] > 1:
        raise ValueError('--in-process runs one learner; several learner ranks need --num-learners over ROS')
    loop = LearnerLoop(make_learner(pl), RunFiles.of_rank(pl))
    loop.start(pl['resume'], pl['warm_start_dataset'], pl['warm_start_epochs'])
    try:
        return sc.run_inprocess(params, num_env_nodes, output_dir, learner=loop)
    finally:
        loop.close()


def evaluate_checkpoint(checkpoint: str | Path, params: dict, num_episodes: int) -> dict:
    """The checkpoint's actor-critic (mean actions) on ``num_episodes`` held-out state ids."""
    from ..rollout.evaluate import actor_critic_act, evaluate, load_actor_critic
    pp = params['policy_node']
    model, version = load_actor_critic(checkpoint, {**pp, 'chunk': params['franka_env_node']['chunk'],
                                                    'action_dim': params['franka_env_node']['action_dim']})
    res = evaluate(actor_critic_act(model), params['franka_env_node'], num_episodes, params['franka_env_node']['chunk'])
    return {'version': version, **res}


def _print_eval(res: dict, out: Path) -> None:
    (out / 'eval.json').write_text(json.dumps(res, indent=1))
    print(f"[sim_eval] v{res['version']} on {res['episodes']} held-out episodes (state ids "
          f"{res['state_ids'][0]}..{res['state_ids'][-1]}): success {res['success_rate']:.0%}, "
          f"return {res['mean_return']:.3f}, length {res['mean_length']:.1f}; {out / 'eval.json'}")


def draw_learning_curve(out: Path) -> None:
    """``<out>/learning_curve.png`` from ``metrics.jsonl`` (the CLI at its end, the launch at exit),
    once there is an update in it."""
    path = Path(out) / 'metrics.jsonl'
    if path.exists() and path.read_text().strip():
        from ..viz.learning_curve import learning_curve
        learning_curve(out, out / 'learning_curve.png')


def main(args) -> int:
    from .run_dir import new_run_dir
    out = (Path(args.output_dir) if args.output_dir else new_run_dir(DEFAULT_OUTPUT_ROOT)).resolve()
    try:
        params = train_params(args.config, args.num_env_nodes, str(out), args.steps, args.num_learners,
                              warm_start=args.warm_start, algo=args.algo, demos=args.demos_dir, num_envs=args.num_envs)
    except (ValueError, FileNotFoundError) as e:
        print(f'[sim_train] {e}', file=sys.stderr)
        return 2
    print(f'[sim_train] output: {out}', flush=True)
    if args.in_process:
        r = run_inprocess(params, args.num_env_nodes, str(out))
        bad = {}
    else:
        learners = {f'learner_{k}' if args.num_learners > 1 else 'learner': ('learner_node', (
            ['-r', f'__ns:=/learner_{k}', '-p', f'actor_rank:={k}'] if args.num_learners > 1 else []))
            for k in range(args.num_learners)}
        from .ros_run import adopt_identity
        r = sc.run_ros(adopt_identity(params, args.run_id, args.secret_file), args.num_env_nodes, str(out),
                       quiet=args.quiet, extra_nodes=learners)
        bad = {n: c for n, c in r['exit_codes'].items() if c not in (0, -2)}
    if r.get('interrupted'):
        print(f"[sim_train] interrupted ({r['interrupted']}): every node stopped and flushed what it held")
    metrics = read_metrics(out)
    from ..learning.loop import summary
    for m in metrics:
        print(f"[sim_train] step {m['step']} -> v{m['version']:.0f}: {summary(m)}")
    draw_learning_curve(out)
    print(f"[sim_train] {len(metrics)} updates; replay buffer: {out / 'replay_buffer'}; metrics: "
          f"{out / 'metrics.jsonl'}, TensorBoard: {out / 'tensorboard'}, curve: {out / 'learning_curve.png'}")
    if bad or r.get('failed'):
        print(f'[sim_train] FAILED nodes: {bad or r["failed"]}', file=sys.stderr)
        return 1
    if args.eval_episodes:
        ckpt = Path(params['learner_node']['checkpoint_dir'])
        _print_eval(evaluate_checkpoint(ckpt / 'rank_0' if args.num_learners > 1 else ckpt, params,
                                        args.eval_episodes), out)
    return 0


def eval_main(args) -> int:
    """``run sim_eval``: score a training run's checkpoint on held-out state ids."""
    if not args.checkpoint:
        print('[sim_eval] --checkpoint is required (a run\'s learner/ directory or a checkpoint file)',
              file=sys.stderr)
        return 2
    out = Path(args.output_dir) if args.output_dir else Path(args.checkpoint).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    params = train_params(args.config, 1, str(out))
    _print_eval(evaluate_checkpoint(args.checkpoint, params, args.eval_episodes or 32), out)
    return 0
