"""A stock lerobot-train ACT run through the policy node vs the same checkpoint in LeRobot's own loop.

1. ``run sim_collect --observation pixels`` records ``--demos`` successful scripted episodes
   over DDS (cameras at ``--image-size``, no cube position in ``observation.state``);
2. stock ``lerobot-train --policy.type=act`` trains on that dataset on CPU (no pretrained
   backbone: offline) for ``--train-steps``;
3. the node: ``run sim_collect --policy lerobot --checkpoint ... --num-envs 1 --eval-episodes N``
   over DDS on the held-out state ids (chunks of 4, ``n_action_steps`` 4);
4. LeRobot's own loop on the same held-out ids in the same order (one env, ``policy.reset()``
   at every episode start, then per control step ``prepare_observation_for_inference`` ->
   preprocessor -> ``select_action`` -> postprocessor, with ``n_action_steps`` 4): the server's
   ``select`` call;
5. the node's per-chunk latency: ``LeRobotPolicy.act`` (pipe round trip + preprocessing +
   4 x select_action) on the recorded observations.

    bash -c 'source env.sh && python bench/bench_lerobot_policy.py [--demos 30] [--train-steps 2000]'
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rl_traj_ros.envs.sim_franka import SimFrankaVecEnv  # noqa: E402
from rl_traj_ros.envs.state_ids import StateIdTable  # noqa: E402
from rl_traj_ros.pipelines.sim_collect import DEFAULT_CONFIG  # noqa: E402
from rl_traj_ros.policies.lerobot_policy import LeRobotPolicy, find_python, server_env  # noqa: E402

CHUNK = 4


def cli(*args: str, timeout: float = 3600) -> str:
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', *args, '--quiet'], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f'sim_collect failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}')
    return r.stdout


def train(dataset: Path, out: Path, steps: int, batch: int) -> tuple[Path, float, list[float]]:
    lerobot_train = find_python().with_name('lerobot-train')
    t0 = time.time()
    r = subprocess.run([str(lerobot_train), '--dataset.repo_id=local/bench', f'--dataset.root={dataset}',
                        '--policy.type=act', '--policy.device=cpu', '--policy.pretrained_backbone_weights=null',
                        '--policy.push_to_hub=false', '--policy.chunk_size=20', f'--policy.n_action_steps={CHUNK}',
                        '--policy.optimizer_lr=1e-4', f'--steps={steps}', f'--batch_size={batch}', '--num_workers=0',
                        '--wandb.enable=false', f'--save_freq={steps}', '--log_freq=100', f'--output_dir={out}'],
                       capture_output=True, text=True, env={**server_env(), 'HF_HOME': str(out.parent / 'hf')})
    if r.returncode != 0:
        raise SystemExit(f'lerobot-train failed:\n{r.stderr[-3000:]}')
    losses = [float(x) for x in re.findall(r'step:\S+ \S+ \S+ \S+ loss:([0-9.]+)', r.stdout + r.stderr)]
    return out / 'checkpoints' / 'last' / 'pretrained_model', time.time() - t0, losses


def lerobot_loop(checkpoint: Path, episodes: int, image_size: int, max_steps: int) -> tuple[float, list[bool]]:
    """LeRobot's per-step loop on the held-out ids, in the order the node's single env takes them."""
    policy = LeRobotPolicy(str(checkpoint), CHUNK, 7, ['front', 'wrist'])
    env = SimFrankaVecEnv(1, image_obs=True, image_size=image_size, max_episode_steps=max_steps,
                          states=StateIdTable(), state_split='eval', observation='pixels')
    outcomes: list[bool] = []
    t0 = time.time()
    try:
        obs, _ = env.reset()
        start = True
        while len(outcomes) < episodes:
            a = policy.select({k: v for k, v in obs.items() if k != 'privileged_states'}, reset=start)
            obs, _, term, trunc, info = env.step(np.asarray(a, np.float32))
            start = bool(term[0] or trunc[0])
            if start:
                outcomes.append(bool(np.asarray(info['success'])[0]))
    finally:
        env.close()
        policy.close()
    return time.time() - t0, outcomes


def chunk_latency(checkpoint: Path, dataset_obs: list[dict]) -> list[float]:
    policy = LeRobotPolicy(str(checkpoint), CHUNK, 7, ['front', 'wrist'])
    try:
        out = []
        for obs in dataset_obs:
            t0 = time.perf_counter()
            policy.act(obs)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        policy.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--demos', type=int, default=30)
    ap.add_argument('--train-steps', type=int, default=2000)
    ap.add_argument('--batch-size', type=int, default=8)
    ap.add_argument('--image-size', type=int, default=64)
    ap.add_argument('--eval-episodes', type=int, default=20)
    ap.add_argument('--workdir', default=None)
    ap.add_argument('--checkpoint', default=None, help='skip steps 1-2: evaluate this checkpoint')
    args = ap.parse_args()
    tmp = Path(args.workdir or tempfile.mkdtemp(prefix='bench_lerobot_'))
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = yaml.safe_load(DEFAULT_CONFIG.read_text())
    env_p = cfg['/**/franka_env_node']['ros__parameters']
    env_p.update(image_size=args.image_size, num_steps=0)
    config = tmp / 'sim.yaml'
    config.write_text(yaml.safe_dump(cfg))
    result: dict = {'demos': args.demos, 'train_steps': args.train_steps, 'image_size': args.image_size}
    if args.checkpoint:
        checkpoint = Path(args.checkpoint)
    else:
        t0 = time.time()
        cli('--config', str(config), '--observation', 'pixels', '--episodes', str(args.demos),
            '--output-dir', str(tmp / 'demos'))
        result['demos_s'] = round(time.time() - t0, 1)
        print(f"[bench] {args.demos} demos in {result['demos_s']} s", flush=True)
        checkpoint, result['train_s'], losses = train(tmp / 'demos' / 'collected_data' / 'env_0', tmp / 'act',
                                                      args.train_steps, args.batch_size)
        result['loss_first_last'] = [losses[0], losses[-1]] if losses else []
        print(f"[bench] lerobot-train ACT {args.train_steps} steps in {result['train_s']:.0f} s, loss "
              f"{result['loss_first_last']}", flush=True)
    t0 = time.time()
    out = cli('--config', str(config), '--policy', 'lerobot', '--checkpoint', str(checkpoint), '--num-envs', '1',
              '--eval-episodes', str(args.eval_episodes), '--output-dir', str(tmp / 'eval_node'))
    m = re.search(r'held-out success: (\d+)/(\d+)', out)
    node_s, node_n = int(m.group(1)), int(m.group(2))
    result['node'] = {'successes': node_s, 'episodes': node_n, 'rate': node_s / node_n,
                      'wall_s': round(time.time() - t0, 1)}
    print(f"[bench] policy node over DDS: {node_s}/{node_n} held-out ({node_s / node_n:.0%})", flush=True)
    wall, outcomes = lerobot_loop(checkpoint, node_n, args.image_size, env_p.get('max_episode_steps', 100))
    ref = sum(outcomes)
    result['lerobot_loop'] = {'successes': ref, 'episodes': len(outcomes), 'rate': ref / len(outcomes),
                              'wall_s': round(wall, 1)}
    print(f'[bench] LeRobot select_action loop: {ref}/{len(outcomes)} held-out ({ref / len(outcomes):.0%})', flush=True)
    env = SimFrankaVecEnv(2, image_obs=True, image_size=args.image_size, states=StateIdTable(), state_split='eval',
                          observation='pixels')
    obs_list = []
    try:
        obs, _ = env.reset()
        for _ in range(30):
            obs_list.append({k: torch.from_numpy(np.asarray(v)) for k, v in obs.items()
                             if k in ('states', 'main_images', 'extra_view_images')})
            obs, *_ = env.step(np.zeros((2, 7), np.float32))
    finally:
        env.close()
    lat = np.array(chunk_latency(checkpoint, obs_list)[3:]) * 1000  # the first calls warm up
    result['chunk_latency_ms'] = {'median': round(float(np.median(lat)), 1), 'p95': round(float(np.percentile(lat, 95)), 1),
                                  'envs': 2, 'control_period_ms': 100}
    print(f"[bench] per-chunk latency (2 envs, 4 control steps): median {result['chunk_latency_ms']['median']} ms, "
          f"p95 {result['chunk_latency_ms']['p95']} ms (one control period at 10 Hz: 100 ms)", flush=True)
    result['difference_points'] = round(100 * abs(result['node']['rate'] - result['lerobot_loop']['rate']), 1)
    (tmp / 'result.json').write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == '__main__':
    main()
