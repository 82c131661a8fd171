"""A batch of single gymnasium envs behind one batched, SAME_STEP auto-resetting interface.

The env node drives any robot through this: ``obs_fn(i, raw)`` maps an env's raw observation
to the spec's keys; finished envs are reset at once and their pre-reset observation is put in
``info['final_obs']`` (CollectEpisode then records exact episodes).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..params.defaults import ENV


class BatchedEnv:
    metadata = {'autoreset_mode': 'SameStep'}
    state_names = action_names = camera_names = robot_type = None

    def __init__(self, envs: list, obs_fn: Callable[[int, Any], dict], task: str, seed: int = ENV.seed,
                 success_key: str = 'succeed'):
        self.envs, self.obs_fn, self.task, self.seed = envs, obs_fn, task, seed
        self.num_envs = len(envs)
        self.success_key = success_key
        self._episode = [0] * self.num_envs
        # what the dimensions and cameras are, when the envs say (dataset feature names)
        for attr in ('state_names', 'action_names', 'camera_names', 'robot_type'):
            if getattr(self, attr, None) is None:
                setattr(self, attr, getattr(envs[0], attr, None) if envs else None)

    def _batch(self, obs: list[dict]) -> dict:
        out = {k: np.stack([o[k] for o in obs]) for k in obs[0]}
        out['task_descriptions'] = [self.task_of(i) for i in range(len(obs))]
        return out

    def task_of(self, i: int) -> str:
        """Env i's task description (one task for all, unless a subclass has variants)."""
        return self.task

    def _reset_one(self, i: int) -> dict:
        raw, _ = self.envs[i].reset(seed=self.seed * 100003 + i * 1009 + self._episode[i])
        raw = self._after_reset(i, raw)
        self._episode[i] += 1
        return self.obs_fn(i, raw)

    def _after_reset(self, i: int, raw: Any) -> Any:
        """Hook: put env i into its episode's initial state; returns its observation."""
        return raw

    def _act(self, i: int, action: np.ndarray) -> np.ndarray:
        """Hook: the action env i executes for the policy's ``action``."""
        return action

    def _outcome(self, i: int, raw: Any, reward: float, terminated: bool, truncated: bool,
                 info: dict) -> tuple[float, bool, bool, bool]:
        """Hook: env i's (reward, terminated, truncated, success) for the step it just took."""
        return reward, terminated, truncated, bool(info.get(self.success_key, False))

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is not None:
            self.seed = seed
        return self._batch([self._reset_one(i) for i in range(self.num_envs)]), {}

    def step(self, actions: np.ndarray):
        actions = np.asarray(actions, np.float32).reshape(self.num_envs, -1)
        obs, rew = [], np.zeros(self.num_envs, np.float32)
        term = np.zeros(self.num_envs, bool)
        trunc = np.zeros(self.num_envs, bool)
        success = np.zeros(self.num_envs, bool)
        final_obs: list = [None] * self.num_envs
        for i, env in enumerate(self.envs):
            raw, r, te, tr, info = env.step(self._act(i, actions[i]))
            r, te, tr, success[i] = self._outcome(i, raw, r, te, tr, info)
            rew[i], term[i], trunc[i] = r, te, tr
            o = self.obs_fn(i, raw)
            if te or tr:
                final_obs[i] = o
                o = self._reset_one(i)
            obs.append(o)
        done = term | trunc
        info: dict = {'success': success, '_success': done}
        if done.any():
            info['final_obs'] = np.array(final_obs, dtype=object)
            info['_final_obs'] = done
            info['final_info'] = {'success': success, '_success': done}
        return self._batch(obs), rew, term, trunc, info

    def close(self) -> None:
        for e in self.envs:
            e.close()
