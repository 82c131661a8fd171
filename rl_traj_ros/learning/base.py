"""What both learners share: the protocol the loop and the learner node drive, which trajectories
are a learner's, what counts as a success, and the one checkpoint format.

``PPOLearner`` (``ppo_learner.py``: one update per completed training step) and ``RLPDLearner``
(``rlpd_learner.py``: gradient steps as the data allows) both satisfy ``Learner``; the learner
node, ``LearnerLoop`` and the in-process run call only what it names.
"""
from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol, runtime_checkable

import torch

from ..params.defaults import LEARNER
from ..data.identity import TrajectoryId
from ..data.trajectory import Trajectory, chunk_ends
from ..storage.files import atomic_write

CHECKPOINT = 'learner_checkpoint.pt'
SUCCESS_REWARD = 0.5  # an episode that terminated with at least this reward succeeded (the collector's rule)


@dataclass
class Update:
    step_id: int
    version: int           # the model version the update produced
    state_dict: dict
    metrics: dict[str, float]
    time: float = field(default_factory=time.time)  # when it was made (learning curves against wall time)


@runtime_checkable
class Learner(Protocol):
    version: int
    counters: dict

    @property
    def model(self) -> torch.nn.Module:
        """What the policy node runs (its state_dict is what an Update carries)."""

    @property
    def pending_steps(self) -> list[int]:
        ...

    def wants(self, ident: TrajectoryId) -> bool:
        """Ours (``is_ours``) and not taken yet: the catch-up from the writer's buffer asks first."""

    def offer(self, traj: Trajectory) -> Optional[Update]:
        ...

    def train(self, budget: int) -> Optional[Update]:
        ...

    def save_checkpoint(self, directory: str | Path) -> Path:
        """``write_checkpoint`` with ``algorithm`` named, so the other learner refuses it."""

    def load_checkpoint(self, directory: str | Path) -> bool:
        """Resume from ``read_checkpoint``; False when there is none."""


def is_ours(ident: TrajectoryId, run_id: str = LEARNER.run_id, only_rank: int = -1) -> bool:
    """A trajectory of this run (``run_id`` '' takes any run's) and, with several learner ranks,
    of this actor rank (``only_rank`` -1 takes every rank's)."""
    return (not run_id or ident.run_id == run_id) and (only_rank < 0 or ident.actor_rank == only_rank)


def episode_ends(traj: Trajectory, success_reward: float = SUCCESS_REWARD) -> tuple[torch.Tensor, torch.Tensor]:
    """(ended, succeeded) per chunk slot [T, B, C]: the episodes that ended there, and those that
    terminated with a reward >= ``success_reward``: one success rule for both learners."""
    done, term = chunk_ends(traj.dones, traj.num_epochs), chunk_ends(traj.terminations, traj.num_epochs)
    return done, term & (traj.rewards >= success_reward)


def write_checkpoint(directory: str | Path, state: dict) -> Path:
    """``state`` as ``<directory>/learner_checkpoint.pt``, written atomically (temp file, fsync,
    rename, directory fsync): a crash leaves the previous checkpoint."""
    buf = io.BytesIO()
    torch.save(state, buf)
    path = Path(directory) / CHECKPOINT
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda fh: fh.write(buf.getvalue()))
    return path


def read_checkpoint(directory: str | Path) -> Optional[dict]:
    """The checkpoint in ``directory`` (``weights_only`` load: no code runs from it), or None."""
    path = Path(directory) / CHECKPOINT
    return torch.load(path, map_location='cpu', weights_only=True) if path.exists() else None
