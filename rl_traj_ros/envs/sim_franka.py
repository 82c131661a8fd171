"""A batch of simulated Franka pick-cube envs (gym-hil PandaPickCubeBase-v0, MuJoCo).

Maps gym-hil observations to the spec's keys: ``states`` = [q(7), dq(7), gripper in [0, 1],
tcp xyz(3), cube xyz(3)] (21 floats; the cube position is read from the sim sensor also when
images are on), ``main_images`` (front camera) and ``extra_view_images`` [1, H, W, 3]
(wrist), ``task_descriptions``. Auto-resets SAME_STEP style: ``info['final_obs']`` holds the
pre-reset observation of envs that finished, so CollectEpisode records episodes exactly.
Rendering: shadows and MSAA off (7x faster with two cameras, research notes §4).
"""
from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

TASK = 'pick up the cube'
STATE_DIM = 21


class SimFrankaVecEnv:
    metadata = {'autoreset_mode': 'SameStep'}

    def __init__(self, num_envs: int = 1, image_obs: bool = False, image_size: int = 128, seed: int = 0,
                 max_episode_steps: int = 100):
        os.environ.setdefault('MUJOCO_GL', 'egl')
        import gymnasium as gym
        import gym_hil  # noqa: F401 - registers the envs
        self.num_envs, self.image_obs, self.seed = num_envs, image_obs, seed
        kwargs = {'image_obs': image_obs}
        if image_obs:
            from gym_hil.mujoco_gym_env import GymRenderingSpec
            kwargs['render_spec'] = GymRenderingSpec(height=image_size, width=image_size)
        self.envs = [gym.make('gym_hil/PandaPickCubeBase-v0', max_episode_steps=max_episode_steps, **kwargs)
                     for _ in range(num_envs)]
        if image_obs:
            for e in self.envs:
                self._fast_rendering(e.unwrapped, image_size)
        self._episode = [0] * num_envs

    @staticmethod
    def _fast_rendering(u: Any, size: int) -> None:
        import mujoco
        u._model.vis.quality.shadowsize = 0
        u._model.vis.quality.offsamples = 0
        old = getattr(u, '_viewer', None)
        if old is not None:
            old.close()
        u._viewer = mujoco.Renderer(u._model, size, size)

    def _obs_one(self, i: int, raw: dict) -> dict:
        u = self.envs[i].unwrapped
        agent = np.asarray(raw['agent_pos'], np.float32).copy()
        agent[14] = agent[14] / 255.0  # gripper command units -> [0, 1]
        cube = np.asarray(u._data.sensor('block_pos').data, np.float32)
        out = {'states': np.concatenate([agent, cube]).astype(np.float32)}
        if self.image_obs:
            out['main_images'] = np.asarray(raw['pixels']['front'], np.uint8)
            out['extra_view_images'] = np.asarray(raw['pixels']['wrist'], np.uint8)[None]
        return out

    def _batch(self, obs: list[dict]) -> dict:
        out = {k: np.stack([o[k] for o in obs]) for k in obs[0]}
        out['task_descriptions'] = [TASK] * len(obs)
        return out

    def _reset_one(self, i: int) -> dict:
        raw, _ = self.envs[i].reset(seed=self.seed * 100003 + i * 1009 + self._episode[i])
        self._episode[i] += 1
        return self._obs_one(i, raw)

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is not None:
            self.seed = seed
        return self._batch([self._reset_one(i) for i in range(self.num_envs)]), {}

    def step(self, actions: np.ndarray):
        """One control step of every env; finished envs are reset (final obs in info)."""
        actions = np.asarray(actions, np.float32).reshape(self.num_envs, -1)
        obs, rew = [], np.zeros(self.num_envs, np.float32)
        term = np.zeros(self.num_envs, bool)
        trunc = np.zeros(self.num_envs, bool)
        success = np.zeros(self.num_envs, bool)
        final_obs: list = [None] * self.num_envs
        for i, env in enumerate(self.envs):
            raw, r, te, tr, info = env.step(actions[i])
            rew[i], term[i], trunc[i] = r, te, tr
            success[i] = bool(info.get('succeed', False))
            o = self._obs_one(i, raw)
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
