"""``LearnerLoop``: a learner with its run's files, the one sequence the node and the in-process run share.

Start: resume from ``checkpoint_dir`` (versions continue, trained steps are not trained
again), or warm-start a fresh learner (behaviour cloning -> version 1: checkpointed,
``warm_start.json``, snapshot). Each update: checkpoint every ``checkpoint_every`` updates
*before* its weights leave (so what the policy answers with is resumable), keep a snapshot of
every ``snapshot_every``-th version, append ``metrics.jsonl`` and TensorBoard scalars. End: a
last checkpoint. What leaves the process (weights, metrics topic) is the caller's.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..params.defaults import LEARNER
from ..data.trajectory import Trajectory
from . import weights as W
from .base import Update
from .ppo_learner import WARM_START


@dataclass
class RunFiles:
    """Where a learner's run keeps what it writes ('' = not written)."""

    checkpoint_dir: str = LEARNER.checkpoint_dir
    checkpoint_every: int = LEARNER.checkpoint_every           # new versions between checkpoints; 0: only at the end
    metrics_dir: str = LEARNER.metrics_dir
    metrics_file: str = 'metrics.jsonl'
    weights_dir: str = LEARNER.weights_dir
    snapshot_every: int = LEARNER.snapshot_every             # 0: no snapshots
    tensorboard_dir: str = LEARNER.tensorboard_dir
    writes_shared: bool = True          # rank 0 of several: snapshots and warm_start.json are written once

    @classmethod
    def of_rank(cls, p: dict) -> 'RunFiles':
        """From the learner node's parameters; with several ranks each checkpoints and logs
        events under ``rank_<r>/`` and rank 0's metrics keep the plain file name."""
        rank, ranks = int(p['actor_rank']), int(p['num_actors'])

        def own(d: str) -> str:
            return str(Path(d) / f'rank_{rank}') if d and ranks > 1 else d
        return cls(own(p['checkpoint_dir']), int(p['checkpoint_every']), p['metrics_dir'],
                   'metrics.jsonl' if rank == 0 else f'metrics_rank{rank}.jsonl', p['weights_dir'],
                   int(p['snapshot_every']), own(p['tensorboard_dir']), rank == 0)


SUMMARY = ('success_rate', 'episodes', 'reward_per_step', 'policy_loss', 'value_loss', 'entropy', 'approx_kl',
           'clip_fraction', 'explained_variance', 'samples_per_s', 'version_lag_max', 'critic_loss', 'actor_loss',
           'q_mean', 'temperature', 'utd', 'updates_per_s', 'online_rows', 'demo_rows', 'intervention_rate')


def summary(metrics: dict[str, float]) -> str:
    """An update's headline figures, PPO's or RLPD's, as one progress line."""
    return ', '.join(f'{k} {metrics[k]:.4g}' for k in SUMMARY if k in metrics)


def append_metrics(path: str | Path, up: Update) -> None:
    """One update as a line of ``metrics.jsonl`` (step, wall-clock time, metrics): what learning
    curves and the benchmark read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, 'a') as fh:
        fh.write(json.dumps({'step': up.step_id, 'time': up.time, **up.metrics}) + '\n')


def write_warm_start(directory: str | Path, up: Update) -> None:
    """The warm start's version, time and cloning metrics as ``<directory>/warm_start.json``."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / WARM_START).write_text(json.dumps({'version': up.version, 'time': up.time, **up.metrics}))


class LearnerLoop:
    def __init__(self, learner, files: RunFiles, log: Callable[[str], None] = print):
        """``learner``: ``learner.Learner`` (PPO) or ``offpolicy.RLPDLearner`` (RLPD)."""
        self.learner, self.files, self.log = learner, files, log
        self._published = 0   # updates (new versions) made by this process
        self.tb = None
        if files.tensorboard_dir:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(files.tensorboard_dir)

    # what a rollout path reads of its learner
    @property
    def version(self) -> int:
        return self.learner.version

    @property
    def model(self):
        return self.learner.model

    @property
    def pending_steps(self) -> list[int]:
        return self.learner.pending_steps

    def start(self, resume: bool = LEARNER.resume, warm_start_dataset: str = LEARNER.warm_start_dataset,
              warm_start_epochs: int = LEARNER.warm_start_epochs) -> None:
        f, lr = self.files, self.learner
        if f.checkpoint_dir and resume and lr.load_checkpoint(f.checkpoint_dir):
            self.log(f'resumed from {f.checkpoint_dir}: version {lr.version}')
        if warm_start_dataset and lr.version == 0 and not lr.counters['updates']:
            up = lr.warm_start_from(warm_start_dataset, warm_start_epochs)  # the same on every rank
            if f.checkpoint_dir:
                lr.save_checkpoint(f.checkpoint_dir)
            if f.writes_shared and f.metrics_dir:
                write_warm_start(f.metrics_dir, up)
            self._snapshot(up)
            self.log(f'warm start from {warm_start_dataset}: v{up.version}, ' +
                     ', '.join(f'{k} {v:.4g}' for k, v in up.metrics.items()))

    def offer(self, traj: Trajectory) -> Optional[Update]:
        """``learner.offer``, then the update's files (the checkpoint before anything leaves)."""
        return self._after(self.learner.offer(traj))

    def train(self, max_steps: int) -> Optional[Update]:
        """``learner.train`` (off-policy: gradient steps between trajectories), then the files."""
        return self._after(self.learner.train(max_steps))

    def _after(self, up: Optional[Update]) -> Optional[Update]:
        if up is None:
            return None
        f, every = self.files, self.files.checkpoint_every
        self._published += 1
        if f.checkpoint_dir and every and self._published % every == 0:
            self.learner.save_checkpoint(f.checkpoint_dir)
        self._snapshot(up)
        if self.tb is not None:
            for k, v in up.metrics.items():
                self.tb.add_scalar(f'learner/{k}', v, up.step_id)
            self.tb.flush()
        if f.metrics_dir:
            append_metrics(Path(f.metrics_dir) / f.metrics_file, up)
        return up

    def _snapshot(self, up: Update) -> None:
        f = self.files
        if f.writes_shared and f.snapshot_every and f.weights_dir and up.version % f.snapshot_every == 0:
            W.save_file(up.state_dict, f.weights_dir, up.version)

    def close(self) -> None:
        if self.files.checkpoint_dir and self.learner.counters['updates']:
            self.learner.save_checkpoint(self.files.checkpoint_dir)
        if self.tb is not None:
            self.tb.close()
            self.tb = None


__all__ = ['RunFiles', 'LearnerLoop', 'append_metrics', 'write_warm_start', 'summary']
