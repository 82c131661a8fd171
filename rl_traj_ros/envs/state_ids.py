"""Initial states by id: a seeded, reproducible table the sim resets to (the trainer's
``reset_envs_to_state_ids``).

Why: without it every episode of the pick-cube task starts from the same state (gym-hil puts
the cube at (0.5, 0, 0.02)), so a run records the same episode over and over and a policy is
evaluated on the states it was trained on. A state id names one initial state (the cube's xy
in a workspace region); the same (seed, id) gives the same state in any process, ids
``[0, num_train)`` are for training and ``[num_train, num_train + num_eval)`` are held out for
evaluation, and every env of every env node walks its own stride through its split, so no two
episodes of a run start alike until the split is used up.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..params.defaults import ENV

SPLITS = ('train', 'eval')


@dataclass(frozen=True)
class InitialState:
    state_id: int
    cube_xy: tuple[float, float]
    task_id: int = ENV.task_id  # the pick-cube task has one variant


class StateIdTable:
    """state id -> InitialState, from ``numpy.random.default_rng([seed, state_id])``."""

    def __init__(self, seed: int = ENV.state_seed, num_train: int = ENV.num_train_states,
                 num_eval: int = ENV.num_eval_states,
                 cube_low: tuple[float, float] = (0.3, -0.15), cube_high: tuple[float, float] = (0.5, 0.15)):
        if num_train < 1 or num_eval < 0:
            raise ValueError(f'num_train must be >= 1 and num_eval >= 0, got {num_train}, {num_eval}')
        self.seed, self.num_train, self.num_eval = int(seed), int(num_train), int(num_eval)
        self.cube_low, self.cube_high = np.asarray(cube_low, float), np.asarray(cube_high, float)

    def ids(self, split: str) -> range:
        if split not in SPLITS:
            raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
        return range(self.num_train) if split == 'train' else range(self.num_train, self.num_train + self.num_eval)

    def state(self, state_id: int) -> InitialState:
        if not 0 <= state_id < self.num_train + self.num_eval:
            raise ValueError(f'state id {state_id} outside the table [0, {self.num_train + self.num_eval})')
        xy = np.random.default_rng([self.seed, int(state_id)]).uniform(self.cube_low, self.cube_high)
        return InitialState(int(state_id), (float(xy[0]), float(xy[1])))

    def scheduled(self, split: str, env_index: int, episode: int, total_envs: int) -> int:
        """The id of episode ``episode`` of global env ``env_index`` (of ``total_envs``): a
        stride per env, so all envs together walk the split without repeating."""
        ids = self.ids(split)
        if not len(ids):
            raise ValueError(f'the {split!r} split is empty')
        return ids[(env_index + episode * total_envs) % len(ids)]
