"""The learner, ROS-free: collector trajectories in, one PPO update per training step, new
weights with the next model version out (the trainer document's loop; the learner node only
adapts messages).

A step is trained once every expected (env row, chunk) cell of that step arrived
(``rows_per_step`` = env nodes x envs, or this actor's share of them, times
``chunks_per_step``); each trajectory identity is consumed once (a resent one is counted and
ignored), so a row is never trained on twice, and the step's trajectories are concatenated in
identity order, not arrival order (the same data gives the same update over DDS and in one
process). With ``max_version_lag`` >= 0, rows rolled out by weights older than ``version -
lag`` are masked out of the loss and counted (asynchronous mode with a bounded lag; masked,
not removed, so ranks that all-reduce gradients keep taking the same number of minibatch
steps); the lag each update saw is reported.

``actor_rank`` >= 0 makes this learner one of several: it takes only the pipeline rows the
collector routed to that actor rank and ``all_reduce`` averages gradients across the ranks.
``run_id`` (when set) ignores trajectories of other runs sharing the topic or buffer.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import torch

from ..params.defaults import LEARNER
from ..data.identity import TrajectoryId
from ..data.trajectory import Trajectory, chunk_ends
from ..policies.normalize import StateNormalizer
from .base import Update, episode_ends, is_ours, read_checkpoint, write_checkpoint
from .ppo import PPOConfig, PPOUpdater, behavior_clone, training_batch

WARM_START = 'warm_start.json'
REWARD_CLIP = 10.0   # normalized rewards are clipped like VecNormalize's (clip_reward 10)


@dataclass
class PPOLearnerConfig:
    rows_per_step: int
    action_dim: int
    gamma: float = LEARNER.gamma
    gae_lambda: float = LEARNER.gae_lambda
    advantage: str = LEARNER.advantage
    auto_reset: bool = LEARNER.auto_reset
    max_version_lag: int = LEARNER.max_version_lag
    chunks_per_step: int = 0     # chunks per env row and step (0: whatever the first trajectory holds)
    only_rank: int = -1          # >= 0: only pipeline rows routed to this actor rank (-1: every rank's)
    run_id: str = LEARNER.run_id             # non-empty: only this run's trajectories
    normalize_rewards: bool = LEARNER.normalize_rewards


class PPOLearner:
    def __init__(self, model, ppo: PPOConfig, cfg: PPOLearnerConfig, version: int = 0, all_reduce=None,
                 seed: int = LEARNER.seed):
        self.model, self.cfg, self.version = model, cfg, int(version)
        self.updater = PPOUpdater(model.parameters(), model.evaluate, ppo, all_reduce=all_reduce, seed=seed)
        self._steps: dict[int, list[Trajectory]] = {}
        self._rows: dict[int, int] = {}
        self._seen: set[TrajectoryId] = set()
        self._trained: set[int] = set()  # steps already in the weights (kept across a resume)
        self.counters = {'trajectories': 0, 'duplicates': 0, 'updates': 0, 'stale_rows_dropped': 0,
                         'not_ours': 0}
        self._t_last = time.monotonic()
        # running moments of the discounted return (normalize_rewards); saved with the checkpoint
        self.return_stats = StateNormalizer(1, min_std=1e-4, clip=float('inf'))
        self._returns: dict[tuple, float] = {}   # env row -> its running discounted return

    def ours(self, ident: TrajectoryId) -> bool:
        """Whether a trajectory of this identity is this learner's (its run, its actor rank)."""
        return is_ours(ident, self.cfg.run_id, self.cfg.only_rank)

    def wants(self, ident: TrajectoryId) -> bool:
        """Whether a trajectory of this identity is ours and not learned from or held yet."""
        return self.ours(ident) and ident not in self._seen and ident.step_id not in self._trained

    @property
    def pending_steps(self) -> list[int]:
        """Steps with some but not all of their rows."""
        return sorted(self._steps)

    def offer(self, traj: Trajectory) -> Optional[Update]:
        """Take one trajectory; returns the update when it completed its step."""
        ident = traj.identity
        if ident is not None and not self.ours(ident):
            self.counters['not_ours'] += 1
            return None
        if ident is not None:
            if ident in self._seen:
                self.counters['duplicates'] += 1
                return None
            self._seen.add(ident)
        step = ident.step_id if ident is not None else traj.keys[0].step_id
        if step in self._trained:  # e.g. re-delivered after a resume: already learned from
            self.counters['duplicates'] += 1
            return None
        self.counters['trajectories'] += 1
        self._steps.setdefault(step, []).append(traj)
        self._rows[step] = self._rows.get(step, 0) + traj.num_envs * traj.actions.shape[0]
        if self._rows[step] < self.cfg.rows_per_step * (self.cfg.chunks_per_step or traj.actions.shape[0]):
            return None
        del self._rows[step]
        return self._train(step, self._steps.pop(step))

    def train(self, max_steps: int) -> Optional[Update]:
        """Nothing between steps: PPO trains in ``offer``, once a step's rows are complete."""
        return None

    def _train(self, step: int, trajs: list[Trajectory]) -> Update:
        cfg = self.cfg
        trajs = sorted(trajs, key=lambda t: (t.identity.epoch_id, t.identity.micro_batch, t.identity.rows)
                       if t.identity is not None else (0, 0, ()))
        scale = self._reward_scale(trajs) if cfg.normalize_rewards else None
        train_on = trajs if scale is None else [
            replace(t, rewards=(t.rewards.to(torch.float32) / scale).clamp(-REWARD_CLIP, REWARD_CLIP))
            if t.advantages is None else t for t in trajs]
        batches = [training_batch(t, cfg.action_dim, cfg.gamma, cfg.gae_lambda, cfg.advantage, cfg.auto_reset)
                   for t in train_on]
        batch = {k: torch.cat([b[k] for b in batches]) for k in batches[0] if k != 'obs'}
        batch['obs'] = {k: torch.cat([b['obs'][k] for b in batches]) for k in batches[0]['obs']}
        lag = self.version - batch['versions'].to(torch.int64)
        if cfg.max_version_lag >= 0:
            stale = lag > cfg.max_version_lag
            self.counters['stale_rows_dropped'] += int(stale.sum())
            batch['response_mask'] = batch['response_mask'] & ~stale.unsqueeze(-1)
        self._update_obs_stats(batch)
        warming = self.counters['updates'] < self.updater.cfg.critic_warmup
        metrics = self.updater.update(batch, actor=not warming)
        metrics['critic_warmup'] = float(warming)
        self.version += 1
        self._trained.add(step)
        self.counters['updates'] += 1
        if scale is not None:
            metrics['reward_scale'] = scale
        metrics.update(self._rollout_metrics(trajs), version_lag_max=float(lag.max()), version=float(self.version),
                       samples=float(batch['response_mask'].any(-1).sum()))
        now = time.monotonic()
        metrics['step_s'], self._t_last = now - self._t_last, now
        return Update(step, self.version, {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                      metrics)

    def _update_obs_stats(self, batch: dict) -> None:
        """Fold the step's states into the model's normalizer before the update (the update then
        trains under the statistics it ships with)."""
        merge = getattr(self.model, 'merge_obs_stats', None)
        states = batch['obs'].get('states')
        if merge is not None and states is not None:
            self._merge_moments(states[batch['response_mask'].any(-1)], merge)

    def _reward_scale(self, trajs: list[Trajectory]) -> Optional[float]:
        """The std of the discounted return, after folding in this step's returns (SB3's
        VecNormalize: ``ret = ret * gamma + r`` per env row, reset at a done, carried into the row's
        next step), by which rewards are divided."""
        rets = []
        for t in trajs:
            if t.advantages is not None:
                continue
            r, d = t.rewards.to(torch.float64).sum(-1), chunk_ends(t.dones, t.num_epochs).amax(-1)
            rows = list(t.identity.rows) if t.identity is not None and t.identity.rows else None
            ret = torch.tensor([self._returns.get(k, 0.0) for k in rows] if rows else [0.0] * r.shape[1],
                               dtype=torch.float64)
            for i in range(r.shape[0]):
                ret = ret * self.cfg.gamma + r[i]
                rets.append(ret.clone())
                ret = ret * (~d[i].bool())
            if rows:
                self._returns.update(zip(rows, ret.tolist()))
        if not rets:
            return None
        self._merge_moments(torch.cat(rets).unsqueeze(-1), self.return_stats.merge)
        return float(self.return_stats.std)

    def _merge_moments(self, x: torch.Tensor, merge) -> None:
        """``merge(count, mean, var)`` of the rows ``x`` [n, d]; ranks sum their moments first, so
        every rank keeps the same statistics."""
        x = x.to(torch.float64)
        moments = torch.cat([torch.tensor([float(x.shape[0])], dtype=torch.float64), x.sum(0), (x * x).sum(0)])
        if self.updater.all_reduce is not None:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                dist.all_reduce(moments, op=dist.ReduceOp.SUM)
        n = moments[0].item()
        if n < 1:
            return
        d = x.shape[1]
        mean = moments[1:1 + d] / n
        merge(n, mean.float(), (moments[1 + d:] / n - mean ** 2).clamp_min(0.0).float())

    @staticmethod
    def _rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
        """Per-step episode figures from the rows: episodes that ended in the step, how many
        succeeded (``base.episode_ends``), mean reward per control step."""
        ended = succeeded = 0
        reward_sum, steps = 0.0, 0
        for t in trajs:
            done, success = episode_ends(t)
            ended += int(done.sum())
            succeeded += int(success.sum())
            reward_sum += float(t.rewards.sum())
            steps += t.rewards.numel()
        return {'episodes': float(ended), 'success_rate': succeeded / ended if ended else 0.0,
                'reward_per_step': reward_sum / max(steps, 1)}

    def warm_start(self, states: torch.Tensor, action_chunks: torch.Tensor, epochs: int = 100) -> Update:
        """Behaviour-clone the actor on demonstrations (``ppo.behavior_clone``) before any update:
        the clone is the next model version, announced like an update (no step is trained)."""
        if self._trained:
            raise ValueError('warm start only before the first update')
        seed = int(self.updater.generator.initial_seed())
        metrics = behavior_clone(self.model, states, action_chunks, epochs, seed=seed)
        self.version += 1
        return Update(-1, self.version, {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                      metrics)

    def warm_start_from(self, dataset_root: str | Path, epochs: int = 100) -> Update:
        """``warm_start`` on every episode of the LeRobot datasets under ``dataset_root``, cut
        into the model's action chunks (``core/demos.py``)."""
        from ..episodes.demos import demo_chunks, read_episodes
        episodes = read_episodes(dataset_root)
        states, chunks = demo_chunks(episodes, self.model.chunk)
        up = self.warm_start(torch.from_numpy(states), torch.from_numpy(chunks), epochs)
        up.metrics['bc_episodes'] = float(len(episodes))
        return up

    # -- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self, directory: str | Path) -> Path:
        """Actor-critic, optimizer, sampler state, version and trained steps, in one file written
        atomically (temp file, fsync, rename, directory fsync): a crash leaves the previous one."""
        return write_checkpoint(directory, {
            'model': self.model.state_dict(), 'optimizer': self.updater.optimizer.state_dict(),
            'generator': self.updater.generator.get_state(), 'version': self.version,
            'trained_steps': sorted(self._trained), 'counters': dict(self.counters),
            'return_stats': self.return_stats.state_dict()})

    def load_checkpoint(self, directory: str | Path) -> bool:
        """Resume from ``directory``'s checkpoint (``weights_only`` load); False when there is none.
        The versions continue, and steps already trained are not trained again."""
        state = read_checkpoint(directory)
        if state is None:
            return False
        if state.get('algorithm', LEARNER.algorithm) != 'ppo':   # written before the key: PPO's
            raise ValueError(f"{directory} holds a {state['algorithm']} learner's checkpoint, not a PPO one")
        self.model.load_state_dict(state['model'])
        self.updater.optimizer.load_state_dict(state['optimizer'])
        self.updater.generator.set_state(state['generator'])
        self.version = int(state['version'])
        self._trained = {int(s) for s in state['trained_steps']}
        self.counters.update({k: int(v) for k, v in state['counters'].items()})
        self.return_stats.load_state_dict(state.get('return_stats', {}))   # older checkpoints: none yet
        return True
