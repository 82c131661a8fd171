"""RLPD learns pick-and-lift from 20 demonstrations: held-out success against wall time and env steps.

The pipeline records the demonstrations first (``run sim_collect --config config/sim_demos.yaml
--in-process``, the scripted expert, not counted in the budget), then ``run sim_train --algo rlpd``
runs over DDS (env node at 10 control steps/s, policy node, collector, writer, learner node)
until the budget is spent (SIGINT); the learner keeps a snapshot of every ``--snapshot-every``-th
version, and each snapshot's mean action is scored on ``--eval-episodes`` episodes: the table's
held-out state ids (``--variant random``) or gym-hil's fixed cube at (0.5, 0) (``--variant
fixed``). ``--interventions``: a scripted operator (test/expert_operator.py) takes over env 0
while the policy strays from the cube, HIL-SERL style. ``--ppo-anchor``: then, in the same run
and with the same budget, the PPO loop of ``bench/bench_learning.py --task pick``
(``config/sim_train_pick.yaml``) warm-started by behaviour cloning on the same number of expert
episodes (recorded as a LeRobot dataset, outside the budget), scored on the same episodes; both
curves in one figure.

    bash -c 'source env.sh && python bench/bench_rlpd.py --variant fixed [--budget-s 420] [--interventions] [--ppo-anchor]'
    bash -c 'source env.sh && python bench/bench_rlpd.py --variant random --learner normalize_states=false'
    bash -c 'source env.sh && python bench/bench_rlpd.py --variant random --compare prioritized_replay=true'
    bash -c 'source env.sh && python bench/bench_rlpd.py --obs pixels --variant random --budget-s 2700'
    bash -c 'source env.sh && python bench/bench_rlpd.py --obs pixels --reward classifier --variant random --budget-s 2700'

``--obs pixels``: the demonstrations and the run see 18 proprioceptive states and the front and
wrist cameras at 64x64 (rendered at the control rate, in evaluation too), never the cube's
position (``config/sim_demos_pixels.yaml``, ``config/sim_train_rlpd_pixels.yaml``: the frozen
keypoint encoder); then, in the same invocation, state-based RLPD as the anchor
(``--anchor-budget-s``). Printed besides the curves: gradient steps/s, the env's achieved control
rate while the learner trains, the encoder's pretraining and its cost per frame.

``--reward classifier`` (with ``--obs pixels``): the learner never sees the sim's reward. A success
classifier (``run train_reward`` with a cell's ``config/train_reward.yaml``, ``--reward-shift-px``) is trained on the demos' frames and a noisy
expert's episodes at each ``--failure-noise`` (flailing and near misses; not in the budget; all
recorded with ``--steps-after-success`` steps after each success, and
both RLPD runs start from these demos), and the env node's ``reward_source: classifier`` gives the reward and the
success end; the sim's own check only scores the snapshots, and each snapshot's evaluation counts
the episodes the classifier called a success and the sim did not (reward hacking). Then, in the same
invocation and budget, the same pixels run with the sim's reward as the anchor.

``--compare KEY=VALUE``: after the first run, a second RLPD run of the same budget on the same
demonstrations with these learner overrides, both curves in one figure.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'bench'))
from bench_learning import CONFIGS, run_ros, spread  # noqa: E402
from rl_traj_ros.params.policy_node import POLICY_NODE  # noqa: E402
from rl_traj_ros.params.spec import resolve  # noqa: E402
from rl_traj_ros.pipelines.sim_collect import load_params  # noqa: E402
from rl_traj_ros.pipelines.sim_train import TRAIN_NODES  # noqa: E402
from rl_traj_ros.rollout.evaluate import actor_critic_act, evaluate, sac_actor_act  # noqa: E402
from rl_traj_ros.assembly import sac_actor  # noqa: E402
from rl_traj_ros.assembly.build import step_reward  # noqa: E402
from rl_traj_ros.params.env_node import ENV_NODE  # noqa: E402


def variant_config(src: Path, dst: Path, variant: str, learner: Optional[dict] = None, **nodes: dict) -> Path:
    """A copy of a shipped config at ``dst`` with gym-hil's fixed cube for ``fixed``, the
    learner's parameters overridden by ``learner`` (an ablation, e.g. normalize_states=false) and
    another node's by ``nodes`` (``franka_env_node={...}``)."""
    c = yaml.safe_load(src.read_text())
    if variant == 'fixed':
        c['/**/franka_env_node']['ros__parameters']['state_split'] = ''
    if learner and '/**/learner_node' in c:
        c['/**/learner_node']['ros__parameters'].update(learner)
    for node, given in nodes.items():
        c.setdefault(f'/**/{node}', {'ros__parameters': {}})['ros__parameters'].update(given)
    dst.write_text(yaml.safe_dump(c))
    return dst


CONFIG_NAMES = {'state': ('sim_demos.yaml', 'sim_train_rlpd.yaml'),
                'pixels': ('sim_demos_pixels.yaml', 'sim_train_rlpd_pixels.yaml')}


def config(tmp: Path, variant: str, snapshot_every: int, learner: dict, obs: str = 'state',
           steps_after_success: Optional[int] = None) -> tuple[Path, Path]:
    """The shipped demo and RLPD configs for this variant and observation (``steps_after_success``
    not None: the demos also as a LeRobot dataset, what a success classifier trains on, each
    success held that many steps: frames that show it)."""
    demos, train = CONFIG_NAMES[obs]
    env = {} if steps_after_success is None else {'collect_episodes': True, 'steps_after_success': steps_after_success}
    return (variant_config(ROOT / 'config' / demos, tmp / demos, variant, franka_env_node=env),
            variant_config(ROOT / 'config' / train, tmp / train, variant, {'snapshot_every': snapshot_every, **learner}))


def encoder_cost_ms(pp: dict, env: dict, frames: int = 200) -> float:
    """The frozen keypoint encoder's cost per frame as the policy node pays it (a request of
    ``num_envs`` observations, every camera), on rendered sim frames."""
    from rl_traj_ros.envs.sim_franka import sim_env_from_params
    from rl_traj_ros.policies.keypoints import camera_views
    actor = sac_actor(pp).eval()
    e = sim_env_from_params({**env, 'state_split': 'eval', 'num_env_nodes': 1}, 0)
    try:
        obs, _ = e.reset()
    finally:
        e.close()
    views = camera_views({k: torch.from_numpy(obs[k]) for k in ('main_images', 'extra_view_images')})
    t = time.perf_counter()
    for _ in range(frames // views.shape[0]):
        actor.encoder.encode(views)
    return (time.perf_counter() - t) * 1e3 / (frames // views.shape[0] * views.shape[0])


def ppo_anchor(tmp: Path, variant: str, demos: int, budget_s: float, eval_episodes: int, max_snapshots: int,
               split: str) -> tuple[list, list]:
    """The PPO warm start of the same budget: behaviour cloning on ``demos`` expert episodes, then
    synchronous PPO over DDS; (wall-time curve, env-step curve) of held-out success."""
    from rl_traj_ros.policies.actor_critic import ActorCritic
    # the same cube as RLPD's for the demos and the training alike
    config, demos_config = (variant_config(src, tmp / f'ppo_{src.name}', variant)
                            for src in (CONFIGS['pick'], ROOT / 'config' / 'sim_collect.yaml'))
    subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--config', str(demos_config),
                    '--in-process', '--no-images', '--episodes', str(demos), '--output-dir', str(tmp / 'ppo_demos')],
                   cwd=ROOT, check=True, capture_output=True)
    p = load_params(config, TRAIN_NODES)
    env, pol = {**p['franka_env_node'], 'num_envs': 2}, p['policy_node']
    snaps, info = run_ros(budget_s, tmp / 'ppo', env['chunk'], config, tmp / 'ppo_demos' / 'collected_data')
    model = ActorCritic(pol['state_dim'], env['action_dim'], env['chunk'], pol['hidden'], seed=0)
    curve, steps_curve = [], []
    for t, sd, steps in spread(snaps, max_snapshots):
        model.load_state_dict(sd)
        r = evaluate(actor_critic_act(model.eval()), env, eval_episodes, env['chunk'], split=split)
        curve.append((t, r['success_rate']))
        steps_curve.append((steps, r['success_rate']))
        print(f"  PPO {t:.0f} s, {steps} env steps: held-out success {r['success_rate']:.0%}")
    print(f"  PPO total: {info['updates']} updates, {info['env_steps']:.0f} env steps")
    return curve, steps_curve


def rlpd_run(tmp: Path, name: str, train_cfg: Path, demos_dir: Path, args,
             budget_s: Optional[float] = None) -> tuple[list, list]:
    """One RLPD run over DDS for the budget, its snapshots scored on held-out episodes:
    (wall-time curve, env-step curve). With the sim's reward withheld (``reward_source`` not
    ``env``) the evaluation episodes end as the run's did (the env node's own step reward: the
    classifier, its threshold and hold), and the episodes it called a success while the sim's
    check never passed are counted (reward hacking), with the sim's successes it missed."""
    budget_s = args.budget_s if budget_s is None else budget_s
    operator, joined = None, []
    if args.interventions:  # a node of the run: its run id and secret, which the CLI takes too
        from rl_traj_ros.delivery.run_guard import new_secret_file
        joined = ['--run-id', f'bench-{name}', '--secret-file', new_secret_file(f'bench-{name}', str(tmp / 'keys'))]
        operator = subprocess.Popen([sys.executable, 'test/expert_operator.py', *joined], cwd=ROOT,
                                    start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = tmp / name
    t0 = time.time()
    run = cli('sim_train', '--config', str(train_cfg), '--demos-dir', str(demos_dir), '--steps', '1000000',
              '--output-dir', str(out), *joined)
    try:
        run.wait(budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGINT)
        run.wait(120)
    finally:
        if operator is not None:
            os.killpg(operator.pid, signal.SIGINT)
            operator.wait(30)
    lines = [json.loads(x) for x in (out / 'metrics.jsonl').read_text().splitlines()]
    at = {int(m['version']): m for m in lines}
    snaps = sorted((int(f.stem.split('_v')[1]), f) for f in (out / 'weights').glob('policy_v*.pt'))
    snaps = [(v, f) for v, f in snaps if v in at and at[v]['time'] - t0 <= budget_s]
    if len(snaps) > args.max_snapshots:
        step = len(snaps) / args.max_snapshots
        snaps = [snaps[min(len(snaps) - 1, round((i + 1) * step) - 1)] for i in range(args.max_snapshots)]
    p = load_params(train_cfg, TRAIN_NODES)
    pp = resolve(POLICY_NODE, p['policy_node'])
    env = {**p['franka_env_node'], 'num_envs': 2}
    split = '' if args.variant == 'fixed' else 'eval'
    curve, steps_curve = [(0.0, 0.0)], [(0.0, 0.0)]
    print(f'{name}: pick and lift ({args.variant} cube), {args.demos} demos'
          f"{' with scripted interventions' if args.interventions else ''}, {args.eval_episodes} held-out "
          f'episodes per snapshot, budget {budget_s:.0f} s')
    ep = resolve(ENV_NODE, env)
    judge = ep['reward_source'] != 'env'
    for v, f in snaps:
        actor = sac_actor(pp)
        actor.load_state_dict(torch.load(f, weights_only=True))
        r = evaluate(sac_actor_act(actor.eval()), env, args.eval_episodes, pp['chunk'], split=split,
                     step_reward=step_reward(ep, ep['camera_names']) if judge else None)
        m = at[v]
        curve.append((m['time'] - t0, r['success_rate']))
        steps_curve.append((m['env_steps'], r['success_rate']))
        eps = r['per_episode']
        judged = (f"; classifier: {sum(e['judged'] and not e['success'] for e in eps)} hacked, "
                  f"{sum(e['success'] and not e['judged'] for e in eps)} missed") if judge else ''
        print(f"  v{v}: {m['time'] - t0:.0f} s, {m['env_steps']:.0f} env steps, {m['updates']:.0f} gradient "
              f"steps (utd {m['utd']:.2f}, {m['updates_per_s']:.0f}/s): held-out success {r['success_rate']:.0%}"
              f"{judged}; training success so far {m['success_rate']:.0%}, intervention rate "
              f"{m['intervention_rate']:.2f}")
    last = lines[-1] if lines else {}
    print(f"  total: {last.get('updates', 0):.0f} gradient steps, {last.get('env_steps', 0):.0f} env steps")
    if len(lines) > 1:  # the env's control rate while the learner trained: control steps per env and second
        rate = (lines[-1]['env_steps'] - lines[0]['env_steps']) / (lines[-1]['time'] - lines[0]['time']) \
            / (env['num_envs'] * p['franka_env_node'].get('num_env_nodes', 1))
        hz = p['franka_env_node']['control_rate_hz']
        print(f'  env control rate while training: {rate:.2f} Hz of {hz:.0f} Hz ({rate / hz:.0%})')
    if 'encoder_pretrain_s' in last:
        print(f"  keypoint encoder: pretrained on {last['encoder_pretrain_frames']:.0f} frames in "
              f"{last['encoder_pretrain_s']:.0f} s (reconstruction loss {last['encoder_pretrain_loss']:.4f}); "
              f'{encoder_cost_ms(pp, env):.2f} ms per frame (2 cameras) in the policy node')
    return curve, steps_curve


def learned_reward(tmp: Path, demos_cfg: Path, args) -> Path:
    """``--reward classifier``: the success classifier a real cell would have, trained by ``run
    train_reward`` on the demonstrations' camera frames and a noisy expert's episodes at each
    ``--failure-noise`` (labeled by the sim's check as an operator would label them): 1.0 flails
    (failures far from the task), 0.1 approaches the cube and misses (near misses: the arm over the
    cube with the gripper open, which a classifier that saw only demos and flailing calls a success
    and RL then provokes); its held-out figures printed. Both recordings hold each success
    ``--steps-after-success`` steps: the frames after the success step are the positives, every
    frame before it a negative (an episode that ends on it has no image of the lifted cube). The
    checkpoint's path."""
    t, recorded = time.time(), [tmp / 'demos' / 'collected_data']
    for k, noise in enumerate(args.failure_noise):
        fail_cfg = variant_config(demos_cfg, tmp / f'failures{k}.yaml', args.variant,
                                  franka_env_node={'target_successes': 0, 'collect_episodes': True,
                                                   'only_success': False, 'steps_after_success': args.steps_after_success},
                                  policy_node={'expert_noise': noise})
        subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--config', str(fail_cfg),
                        '--steps', str(args.failure_steps), '--output-dir', str(tmp / f'failures{k}'), '--in-process'],
                       cwd=ROOT, check=True, capture_output=True)
        recorded.append(tmp / f'failures{k}' / 'collected_data')
    training = yaml.safe_load((ROOT / 'config' / 'train_reward.yaml').read_text())   # a cell's, as docs/real_robot.md
    if args.reward_shift_px is not None:
        training['shift_px'] = args.reward_shift_px
    (tmp / 'reward_training.yaml').write_text(yaml.safe_dump(training))
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'train_reward', '--demos', *map(str, recorded),
                        '--config', str(tmp / 'reward_training.yaml'), '--output-dir', str(tmp / 'reward')],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f'train_reward failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}')
    said = r.stdout.splitlines()
    print(f'success classifier (not in the budget, {time.time() - t:.0f} s with its noisy-expert episodes at noise '
          f'{", ".join(f"{n:g}" for n in args.failure_noise)}; shift {training["shift_px"]} px): {said[0]}; {said[-1]}')
    return tmp / 'reward' / 'success_classifier.pt'


def record_demos(demos_cfg: Path, out: Path, episodes: int) -> None:
    t = time.time()
    subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--config', str(demos_cfg),
                    '--episodes', str(episodes), '--output-dir', str(out), '--in-process'],
                   cwd=ROOT, check=True, capture_output=True)
    print(f'{episodes} expert demonstrations ({demos_cfg.name}) recorded in {time.time() - t:.0f} s (not in the budget)')


def cli(*args, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.cli', 'run', *args, '--quiet'], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **kw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--variant', choices=['fixed', 'random'], default='fixed')
    ap.add_argument('--obs', choices=['state', 'pixels'], default='state',
                    help="pixels: config/sim_*_pixels.yaml (18 proprioceptive states + 64x64 front and wrist "
                         "cameras, no cube position), then the state-based run as the anchor")
    ap.add_argument('--anchor-budget-s', type=float, default=600.0, help='--obs pixels: the state anchor\'s budget; '
                    "--reward classifier: the sim-reward pixels anchor's")
    ap.add_argument('--budget-s', type=float, default=420.0)
    ap.add_argument('--demos', type=int, default=20)
    ap.add_argument('--eval-episodes', type=int, default=20)
    ap.add_argument('--snapshot-every', type=int, default=20, help='versions between kept snapshots')
    ap.add_argument('--max-snapshots', type=int, default=10)
    ap.add_argument('--interventions', action='store_true')
    ap.add_argument('--learner', action='append', default=[], metavar='KEY=VALUE',
                    help="override a learner parameter of config/sim_train_rlpd.yaml (YAML value), e.g. "
                         "normalize_states=false")
    ap.add_argument('--ppo-anchor', action='store_true', help='also the PPO warm start of the same budget')
    ap.add_argument('--compare', action='append', default=[], metavar='KEY=VALUE',
                    help='then a second RLPD run with these learner overrides, the same demos and budget (e.g. '
                         'prioritized_replay=true against the uniform draw)')
    ap.add_argument('--reward', choices=['sim', 'classifier'], default='sim',
                    help="classifier (with --obs pixels): the env's reward withheld, a success classifier trained "
                         'on the demos and a noisy expert\'s episodes gives it (config: reward_source classifier); '
                         'then the sim-reward run of the same budget as the anchor')
    ap.add_argument('--reward-hold', type=int, default=3, help='--reward classifier: frames over the threshold '
                    'before a success counts (the classifier sees the cube rising a few frames before the sim\'s '
                    'lift check)')
    ap.add_argument('--reward-threshold', type=float, default=float('nan'), help='--reward classifier: the env '
                    "node's success threshold (NaN: the checkpoint's, train_reward's 0.5)")
    ap.add_argument('--steps-after-success', type=int, default=10, help='--reward classifier: the demos and the '
                    "noisy expert's episodes go on this many steps after a success (the env node's "
                    'steps_after_success): the frames that show the cube lifted are the classifier\'s positives, the '
                    'moment before a negative')
    ap.add_argument('--failure-noise', type=float, nargs='+', default=[1.0, 0.1], help="--reward classifier: the "
                    "noisy expert's action noise (std), one recording of negative episodes per value: 1.0 flails, "
                    '0.1 reaches the cube and misses (near misses)')
    ap.add_argument('--reward-shift-px', type=int, default=None, help="--reward classifier: train_reward's random image "
                    "shift (shift_px; default config/train_reward.yaml's, a real cell's): the classifier cannot key on "
                    'where the cube sits in the wrist view')
    ap.add_argument('--failure-steps', type=int, default=30, help='--reward classifier: training steps (x 20 '
                    'control steps x 2 envs) of noisy-expert episodes')
    ap.add_argument('--out', default='bench_rlpd.png')
    args = ap.parse_args()
    if args.reward == 'classifier' and args.obs != 'pixels':
        ap.error('--reward classifier needs --obs pixels (the classifier sees the cameras)')
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        learner = {k: yaml.safe_load(v) for k, v in (x.split('=', 1) for x in args.learner)}
        learned = args.reward == 'classifier'
        demos_cfg, train_cfg = config(tmp, args.variant, args.snapshot_every, learner, args.obs,
                                      args.steps_after_success if learned else None)
        record_demos(demos_cfg, tmp / 'demos', args.demos)
        name = (f"RLPD{' from pixels' if args.obs == 'pixels' else ''}, {args.demos} demos"
                f"{' + interventions' if args.interventions else ''}")
        curves, steps_curves = {}, {}
        if learned:
            checkpoint = learned_reward(tmp, demos_cfg, args)
            cls_cfg = variant_config(train_cfg, tmp / 'classifier_train.yaml', 'random', franka_env_node={
                'reward_source': 'classifier', 'reward_classifier': str(checkpoint), 'reward_hold': args.reward_hold,
                'reward_threshold': args.reward_threshold})
            label = f'{name}, learned reward (the sim\'s withheld)'
            curves[label], steps_curves[label] = rlpd_run(tmp, 'classifier_run', cls_cfg, tmp / 'demos' / 'replay_buffer',
                                                          args)
            name = f'{name}, sim reward (anchor)'
        curves[name], steps_curves[name] = rlpd_run(tmp, 'run', train_cfg, tmp / 'demos' / 'replay_buffer', args,
                                                    budget_s=args.anchor_budget_s if learned else None)
        if args.obs == 'pixels' and not learned:
            print(f'anchor: state-based RLPD (the cube\'s position in the states), budget {args.anchor_budget_s:.0f} s')
            (tmp / 'anchor').mkdir()
            a_demos, a_train = config(tmp / 'anchor', args.variant, args.snapshot_every, learner, 'state')
            record_demos(a_demos, tmp / 'anchor' / 'demos', args.demos)
            anchor = f'RLPD from state (anchor), {args.demos} demos'
            curves[anchor], steps_curves[anchor] = rlpd_run(tmp, 'anchor_run', a_train,
                                                            tmp / 'anchor' / 'demos' / 'replay_buffer', args,
                                                            budget_s=args.anchor_budget_s)
        if args.compare:
            other = {k: yaml.safe_load(v) for k, v in (x.split('=', 1) for x in args.compare)}
            (tmp / 'compare').mkdir()
            _, other_cfg = config(tmp / 'compare', args.variant, args.snapshot_every, {**learner, **other})
            label = f"{name}, {', '.join(args.compare)}"
            curves[label], steps_curves[label] = rlpd_run(tmp, 'compare_run', other_cfg,
                                                          tmp / 'demos' / 'replay_buffer', args)
        if args.ppo_anchor:
            split = '' if args.variant == 'fixed' else 'eval'
            print(f'PPO warm start (behaviour cloning on {args.demos} expert episodes), same budget:')
            ppo = f'PPO, behaviour-cloned from {args.demos} demos'
            curves[ppo], steps_curves[ppo] = ppo_anchor(tmp, args.variant, args.demos, args.budget_s,
                                                        args.eval_episodes, args.max_snapshots, split)
    from rl_traj_ros.viz.curves import plot_curves
    plot_curves(curves, args.out, f'pick and lift ({args.variant} cube): held-out success against wall time',
                'wall time (s)', 'held-out success', percent=True)
    plot_curves(steps_curves, Path(args.out).with_name(Path(args.out).stem + '_steps.png'),
                f'pick and lift ({args.variant} cube): held-out success against env steps', 'env steps',
                'held-out success', percent=True)
    print(f'curves: {args.out}')


if __name__ == '__main__':
    main()
