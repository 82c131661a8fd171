"""The learner, ROS-free: collector trajectories in, one PPO update per training step, new
weights with the next model version out (the trainer document's loop; the learner node only
adapts messages).

A step is trained once the trajectories of every expected env row of that step arrived
(``rows_per_step`` = env nodes x envs); each trajectory identity is consumed once (a resent
one is counted and ignored), so a row is never trained on twice. With ``max_version_lag``
>= 0, rows rolled out by weights older than ``version - lag`` are dropped and counted
(asynchronous mode with a bounded lag); the lag each update saw is reported.
"""
from __future__ import annotations

import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from .delivery import TrajectoryId
from .ppo import PPOConfig, PPOUpdater, training_batch
from .storage import atomic_write
from .trajectory import Trajectory, chunk_ends

CHECKPOINT = 'learner_checkpoint.pt'


@dataclass
class LearnerConfig:
    rows_per_step: int
    action_dim: int
    gamma: float = 0.99
    gae_lambda: float = 0.95
    advantage: str = 'gae'
    auto_reset: bool = True
    max_version_lag: int = -1


@dataclass
class Update:
    step_id: int
    version: int           # the model version the update produced
    state_dict: dict
    metrics: dict[str, float]


class Learner:
    def __init__(self, model, ppo: PPOConfig, cfg: LearnerConfig, version: int = 0, all_reduce=None, seed: int = 0):
        self.model, self.cfg, self.version = model, cfg, int(version)
        self.updater = PPOUpdater(model.parameters(), model.evaluate, ppo, all_reduce=all_reduce, seed=seed)
        self._steps: dict[int, list[Trajectory]] = {}
        self._rows: dict[int, int] = {}
        self._seen: set[TrajectoryId] = set()
        self._trained: set[int] = set()  # steps already in the weights (kept across a resume)
        self.counters = {'trajectories': 0, 'duplicates': 0, 'updates': 0, 'stale_rows_dropped': 0}
        self._t_last = time.monotonic()

    def offer(self, traj: Trajectory) -> Optional[Update]:
        """Take one trajectory; returns the update when it completed its step."""
        ident = traj.identity
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
        self._rows[step] = self._rows.get(step, 0) + traj.num_envs
        if self._rows[step] < self.cfg.rows_per_step:
            return None
        return self._train(step, self._steps.pop(step))

    def _train(self, step: int, trajs: list[Trajectory]) -> Update:
        cfg = self.cfg
        batches = [training_batch(t, cfg.action_dim, cfg.gamma, cfg.gae_lambda, cfg.advantage, cfg.auto_reset)
                   for t in trajs]
        batch = {k: torch.cat([b[k] for b in batches]) for k in batches[0] if k != 'obs'}
        batch['obs'] = {k: torch.cat([b['obs'][k] for b in batches]) for k in batches[0]['obs']}
        lag = self.version - batch['versions'].to(torch.int64)
        if cfg.max_version_lag >= 0:
            keep = lag <= cfg.max_version_lag
            self.counters['stale_rows_dropped'] += int((~keep).sum())
            batch = {k: ({kk: vv[keep] for kk, vv in v.items()} if k == 'obs' else v[keep]) for k, v in batch.items()}
        metrics = self.updater.update(batch) if batch['actions'].shape[0] else {}
        self.version += 1
        self._trained.add(step)
        self.counters['updates'] += 1
        metrics.update(self._rollout_metrics(trajs), version_lag_max=float(lag.max()), version=float(self.version),
                       samples=float(batch['actions'].shape[0]))
        now = time.monotonic()
        metrics['step_s'], self._t_last = now - self._t_last, now
        return Update(step, self.version, {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                      metrics)

    @staticmethod
    def _rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
        """Per-step episode figures from the rows: episodes that ended in the step, how many
        succeeded (terminated with a positive reward), mean reward per control step."""
        ended = succeeded = 0
        reward_sum, steps = 0.0, 0
        for t in trajs:
            done, term = chunk_ends(t.dones, t.num_epochs), chunk_ends(t.terminations, t.num_epochs)
            ended += int(done.sum())
            succeeded += int((term & (t.rewards > 0)).sum())
            reward_sum += float(t.rewards.sum())
            steps += t.rewards.numel()
        return {'episodes': float(ended), 'success_rate': succeeded / ended if ended else 0.0,
                'reward_per_step': reward_sum / max(steps, 1)}

    # -- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self, directory: str | Path) -> Path:
        """Actor-critic, optimizer, sampler state, version and trained steps, in one file written
        atomically (temp file, fsync, rename, directory fsync): a crash leaves the previous one."""
        state = {'model': self.model.state_dict(), 'optimizer': self.updater.optimizer.state_dict(),
                 'generator': self.updater.generator.get_state(), 'version': self.version,
                 'trained_steps': sorted(self._trained), 'counters': dict(self.counters)}
        buf = io.BytesIO()
        torch.save(state, buf)
        path = Path(directory) / CHECKPOINT
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda fh: fh.write(buf.getvalue()))
        return path

    def load_checkpoint(self, directory: str | Path) -> bool:
        """Resume from ``directory``'s checkpoint (``weights_only`` load); False when there is none.
        The versions continue, and steps already trained are not trained again."""
        path = Path(directory) / CHECKPOINT
        if not path.exists():
            return False
        state = torch.load(path, map_location='cpu', weights_only=True)
        self.model.load_state_dict(state['model'])
        self.updater.optimizer.load_state_dict(state['optimizer'])
        self.updater.generator.set_state(state['generator'])
        self.version = int(state['version'])
        self._trained = {int(s) for s in state['trained_steps']}
        self.counters.update({k: int(v) for k, v in state['counters'].items()})
        return True
