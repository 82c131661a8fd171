"""Learner update throughput (samples/s) against a plain torch PPO update on the same batch.

Batch: one training step of the sim_train shape scaled up: B env rows x T chunks of C=4 x 7-dof
actions, 21 float states (``--rows 64 --chunks 64``: 4096 samples), 4 epochs of 64-sample
minibatches, the package's ActorCritic (hidden 64). Measured, interleaved, best of ``--repeats``:
  - ``PPOUpdater.update``: the learner's update (response masks, value clipping, metrics);
  - ``PPOLearner.offer``: the same from a collector Trajectory (training_batch + update);
  - anchor: the textbook PPO loop in plain torch (ratio, clipped surrogate, value loss,
    backward, clip_grad_norm_, Adam), same model, same minibatches, no masks or metrics.
Goal: the learner's update within 10 % of the anchor (ratio >= 0.9).

    bash -c 'source env.sh && python bench/bench_learner_update.py [--rows 64 --chunks 64]'
"""
from __future__ import annotations

import argparse
import copy
import time

import torch

from rl_traj_ros.data.identity import TrajectoryId
from rl_traj_ros.data.trajectory import Trajectory
from rl_traj_ros.learning.ppo_learner import PPOLearner, PPOLearnerConfig
from rl_traj_ros.learning.ppo import PPOConfig, PPOUpdater, training_batch
from rl_traj_ros.policies.actor_critic import ActorCritic

C, A, S = 4, 7, 21


def make_trajectory(t: int, b: int, step: int = 0) -> Trajectory:
    g = torch.Generator().manual_seed(step)
    model = ActorCritic(S, A, C, hidden=64, seed=0)
    obs = torch.randn(t, b, S, generator=g)
    actions, logp, values = model.act({'states': obs.reshape(t * b, S)}, generator=g)
    d = torch.rand(t + 1, b, C, generator=g) < 0.01
    v = torch.cat([values.reshape(t, b, 1), torch.zeros(1, b, 1)])
    return Trajectory(actions=actions.reshape(t, b, C * A), rewards=torch.rand(t, b, C, generator=g),
                      prev_logprobs=logp.reshape(t, b, C * A), versions=torch.zeros(t, b, C, dtype=torch.int64),
                      intervene_flags=torch.zeros(t, b, C * A, dtype=torch.bool), dones=d, terminations=d,
                      truncations=torch.zeros_like(d), prev_values=v, curr_obs={'states': obs},
                      identity=TrajectoryId('bench', 'rollout', step, rows=tuple((0, 0, i) for i in range(b))))


def plain_ppo(model: ActorCritic, batch: dict, cfg: PPOConfig, seed: int = 0) -> None:
    """The anchor: PPO as a textbook writes it, nothing else."""
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    g = torch.Generator().manual_seed(seed)
    adv = batch['advantages']
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    n = adv.shape[0]
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=g)
        for start in range(0, n, cfg.minibatch_size):
            idx = order[start:start + cfg.minibatch_size]
            logp, ent, values = model.evaluate({'states': batch['obs']['states'][idx]}, batch['actions'][idx])
            ratio = (logp - batch['old_logprobs'][idx]).exp()
            a = adv[idx].unsqueeze(-1)
            pg = torch.maximum(-a * ratio, -a * ratio.clamp(1 - cfg.clip_ratio, 1 + cfg.clip_ratio)).mean()
            vl = 0.5 * ((values - batch['returns'][idx]) ** 2).mean()
            loss = pg + cfg.value_coef * vl - cfg.entropy_coef * ent.mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--rows', type=int, default=64)
    ap.add_argument('--chunks', type=int, default=64)
    ap.add_argument('--repeats', type=int, default=3)
    args = ap.parse_args()
    cfg = PPOConfig(epochs=4, minibatch_size=64)
    traj = make_trajectory(args.chunks, args.rows)
    batch = training_batch(traj, A)
    n = batch['actions'].shape[0]
    base = ActorCritic(S, A, C, hidden=64, seed=0)

    def run_updater() -> None:
        m = copy.deepcopy(base)
        PPOUpdater(m.parameters(), m.evaluate, cfg).update(batch)

    def run_learner() -> None:
        m = copy.deepcopy(base)
        PPOLearner(m, cfg, PPOLearnerConfig(rows_per_step=args.rows, action_dim=A)).offer(traj)

    def run_plain() -> None:
        plain_ppo(copy.deepcopy(base), batch, cfg)
    cases = {'PPOUpdater.update': run_updater, 'PPOLearner.offer (batch + update)': run_learner,
             'plain torch PPO (anchor)': run_plain}
    best = {k: float('inf') for k in cases}
    for _ in range(args.repeats):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    print(f'batch {n} samples ({args.rows} rows x {args.chunks} chunks, C={C}, A={A}), {cfg.epochs} epochs of '
          f'{cfg.minibatch_size}, torch {torch.__version__}, {torch.get_num_threads()} threads; best of '
          f'{args.repeats}')
    anchor = n * cfg.epochs / best['plain torch PPO (anchor)']
    for name, s in best.items():
        rate = n * cfg.epochs / s
        print(f'  {name:32s} {s * 1e3:8.1f} ms  {rate:9.0f} samples/s  ratio {rate / anchor:.2f}')


if __name__ == '__main__':
    main()
