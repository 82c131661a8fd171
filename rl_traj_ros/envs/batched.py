"""A batch of single gymnasium envs behind one batched, SAME_STEP auto-resetting interface.

The env node drives any robot through this: ``obs_fn(i, raw)`` maps an env's raw observation
to the spec's keys; finished envs are reset at once and their pre-reset observation is put in
``info['final_obs']`` (CollectEpisode then records exact episodes). ``step_reward``
(``rewards.step_reward``; None: the env's own) decides each env's reward, end and success after
its step and before its reset, so an episode that an operator's label or the success classifier
ends resets like one the env ended; ``info['success']`` is then the decided success (what the
dataset records: the operator's label, the classifier's), ``info['reward_source']`` and
``info['rerecord']`` say what decided. ``success_is_truth``: the env's own check is the truth
(the sim's: it scores a run whose reward it withholds) and travels as ``info['true_success']``,
which the run's success counts take; a real cell has none.
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
        self.step_reward = None
        self.success_is_truth = False
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
        success, true = np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool)
        source, rerecord = np.zeros(self.num_envs, np.int64), np.zeros(self.num_envs, bool)
        final_obs: list = [None] * self.num_envs
        for i, env in enumerate(self.envs):
            raw, r, te, tr, info = env.step(self._act(i, actions[i]))
            r, te, tr, success[i] = self._outcome(i, raw, r, te, tr, info)
            true[i], o = success[i], self.obs_fn(i, raw)
            if self.step_reward is not None:
                d = self.step_reward.decide(i, o, r, te, tr, success[i])
                r, te, tr, success[i] = d.reward, d.terminated, d.truncated, d.success
                source[i], rerecord[i] = int(d.source), d.rerecord
            rew[i], term[i], trunc[i] = r, te, tr
            if te or tr:
                final_obs[i] = o
                o = self._reset_one(i)
                if self.step_reward is not None:
                    self.step_reward.reset(i)
            obs.append(o)
        done = term | trunc
        # 'success' is the episode's (read where it ended: '_success'); 'step_success' is each step's
        # own, what the dataset's next.success marks (the success step and the steps after it)
        info: dict = {'success': success, '_success': done, 'step_success': success.copy(), 'reward_source': source,
                      'rerecord': rerecord}
        if self.success_is_truth:
            info['true_success'] = true
        if done.any():
            info['final_obs'] = np.array(final_obs, dtype=object)
            info['_final_obs'] = done
            info['final_info'] = {k: info[k] for k in ('success', '_success', 'true_success') if k in info}
        return self._batch(obs), rew, term, trunc, info

    def close(self) -> None:
        for e in self.envs:
            e.close()
