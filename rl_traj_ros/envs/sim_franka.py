"""A batch of simulated Franka pick-cube envs (gym-hil PandaPickCubeBase-v0, MuJoCo).

Maps gym-hil observations to the spec's keys: ``states`` = [q(7), dq(7), gripper in [0, 1],
tcp xyz(3), cube xyz(3)] (21 floats; the cube position is read from the sim sensor also when
images are on), ``main_images`` (front camera) and ``extra_view_images`` [1, H, W, 3]
(wrist), ``task_descriptions``. Auto-resets SAME_STEP style: ``info['final_obs']`` holds the
pre-reset observation of envs that finished, so CollectEpisode records episodes exactly.
Rendering: shadows and MSAA off (7x faster with two cameras, research notes §4).

Observation modes (``observation``): 'state' as above; 'pixels' what a real cell has, the
proprioception (the first 18 states: joints, joint velocities, gripper, TCP) and the two
cameras, no object state. The cube's position stays in the sim for reward, success and
evaluation, and travels as ``privileged_states`` (all 21) for the scripted expert only: no
learner or LeRobot policy reads that key.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np

from ..params.defaults import ENV
from ..params.env_node import ENV_NODE
from ..params.spec import resolve
from .batched import BatchedEnv
from .state_ids import StateIdTable

TASK = 'pick up the cube'
# task ids: 0 = gym-hil's pick-and-lift; 1 = reach: bring the gripper's pinch point within
# REACH_RADIUS of the cube (state only; dense reward -distance capped at REACH_MAX_PENALTY,
# +1 and the episode ends on success; the policy's xyz in [-1, 1] moves the target by up to
# REACH_STEP_M per control step, rotation and gripper held): a variant PPO learns from
# scratch on a laptop CPU.
TASKS = (TASK, 'reach the cube')
REACH_RADIUS = 0.02
REACH_STEP_M = 0.025
REACH_MAX_PENALTY = 0.5
STATE_DIM = 21
PROPRIO_DIM = 18  # the states without the cube's xyz (observation 'pixels')
OBSERVATIONS = ('state', 'pixels')
JOINTS = [f'joint{i}' for i in range(1, 8)]  # the MJCF's joint names
STATE_NAMES = ([f'{j}.pos' for j in JOINTS] + [f'{j}.vel' for j in JOINTS] + ['gripper.pos']
               + [f'tcp.{a}' for a in 'xyz'] + [f'cube.{a}' for a in 'xyz'])
ACTION_NAMES = ['delta_x', 'delta_y', 'delta_z', 'delta_rx', 'delta_ry', 'delta_rz', 'gripper']
CAMERA_NAMES = ['front', 'wrist']  # gym-hil's pixels keys: main_images, extra_view_images[0]


class SimFrankaVecEnv(BatchedEnv):
    """``states``: the table of initial states (state_ids.py); each env's episodes take the
    ids of ``state_split`` on the env's own stride (``env_offset`` = this batch's first global
    env index, ``total_envs`` = envs of all env nodes). Without a table gym-hil's fixed start."""
    state_names, action_names, camera_names = STATE_NAMES, ACTION_NAMES, CAMERA_NAMES
    robot_type = 'panda'  # gym-hil's MuJoCo Panda

    def __init__(self, num_envs: int, image_obs: bool = ENV.image_obs, image_size: int = ENV.image_size,
                 seed: int = ENV.seed, max_episode_steps: int = ENV.max_episode_steps,
                 states: Optional[StateIdTable] = None, state_split: str = ENV.state_split, env_offset: int = 0,
                 total_envs: Optional[int] = None, task_id: int = ENV.task_id, observation: str = ENV.observation):
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")
        if observation == 'pixels' and not image_obs:
            raise ValueError("observation 'pixels' needs the cameras (image_obs true): without them the policy "
                             'would see neither the cube nor its position')
        self.pixels = observation == 'pixels'
        if self.pixels:
            self.state_names = STATE_NAMES[:PROPRIO_DIM]
        self.states, self.state_split = states, state_split
        self.task_ids = [self._check_task(task_id)] * num_envs
        if states is not None:
            states.ids(state_split)  # checks the split's name
        self.env_offset, self.total_envs = int(env_offset), int(total_envs or num_envs)
        self.state_ids = [-1] * num_envs  # the state id each env's current episode started from
        self._forced: Optional[list] = None  # ids of an explicit reset_envs_to_state_ids
        os.environ.setdefault('MUJOCO_GL', 'egl')
        # Mesa's (software EGL's) shader disk cache writes from a thread of its own that the process's
        # exit waits for: seconds on a loaded machine, past launch's SIGTERM after a Ctrl-C
        # (test_launch_signals). Its shaders compile in milliseconds; a GPU driver has no Mesa cache.
        os.environ.setdefault('MESA_SHADER_CACHE_DISABLE', 'true')
        import gym_hil  # noqa: F401 - registers the envs
        self.image_obs = image_obs
        kwargs = {'image_obs': image_obs}
        if image_obs:
            from gym_hil.mujoco_gym_env import GymRenderingSpec
            kwargs['render_spec'] = GymRenderingSpec(height=image_size, width=image_size)
        envs = [gym.make('gym_hil/PandaPickCubeBase-v0', max_episode_steps=max_episode_steps, **kwargs)
                for _ in range(num_envs)]
        if image_obs:
            for e in envs:
                self._fast_rendering(e.unwrapped, image_size)
        super().__init__(envs, self._obs_one, TASK, seed)
        self.success_is_truth = True   # the sim knows where the cube is: its check scores any reward source

    @staticmethod
    def _fast_rendering(u: Any, size: int) -> None:
        import mujoco
        u._model.vis.quality.shadowsize = 0
        u._model.vis.quality.offsamples = 0
        old = getattr(u, '_viewer', None)
        if old is not None:
            old.close()
        u._viewer = mujoco.Renderer(u._model, size, size)

    def reset_envs_to_state_ids(self, state_ids: Sequence[int], task_ids: Optional[Sequence[int]] = None):
        """Reset every env now, env i to ``state_ids[i]`` (RLinf's call at a training step's start);
        later auto-resets continue on the envs' own strides."""
        if self.states is None:
            raise ValueError('this env has no state table (states=None): nothing to reset to')
        if len(state_ids) != self.num_envs:
            raise ValueError(f'{len(state_ids)} state ids for {self.num_envs} envs')
        if task_ids is not None:
            if len(task_ids) != self.num_envs:
                raise ValueError(f'{len(task_ids)} task ids for {self.num_envs} envs')
            self.task_ids = [self._check_task(t) for t in task_ids]
        self._forced = [int(x) for x in state_ids]
        try:
            return self._batch([self._reset_one(i) for i in range(self.num_envs)]), {}
        finally:
            self._forced = None

    def _after_reset(self, i: int, raw: dict) -> dict:
        if self.states is None:
            return raw
        import mujoco
        sid = self._forced[i] if self._forced is not None else self.states.scheduled(
            self.state_split, self.env_offset + i, self._episode[i], self.total_envs)
        st = self.states.state(sid)
        u = self.envs[i].unwrapped
        u._data.jnt('block').qpos[:3] = (*st.cube_xy, u._block_z)
        mujoco.mj_forward(u._model, u._data)
        u._z_init = u._data.sensor('block_pos').data[2]
        u._z_success = u._z_init + 0.1
        self.state_ids[i] = sid
        return u._compute_observation()

    @staticmethod
    def _check_task(task_id) -> int:
        if int(task_id) not in range(len(TASKS)):
            raise ValueError(f'task id must be in [0, {len(TASKS)}) ({", ".join(TASKS)}), got {task_id}')
        return int(task_id)

    def task_of(self, i: int) -> str:
        return TASKS[self.task_ids[i]]

    def _act(self, i: int, action: np.ndarray) -> np.ndarray:
        if self.task_ids[i] != 1:
            return action
        out = np.zeros(7, np.float32)
        out[:3] = np.clip(action[:3], -1.0, 1.0) * REACH_STEP_M
        return out

    def reach_distance(self, i: int) -> float:
        """Env i's pinch-point-to-cube distance (m)."""
        d = self.envs[i].unwrapped._data
        return float(np.linalg.norm(d.sensor('block_pos').data - d.sensor('2f85/pinch_pos').data))

    def _outcome(self, i: int, raw: dict, reward: float, terminated: bool, truncated: bool,
                 info: dict) -> tuple[float, bool, bool, bool]:
        if self.task_ids[i] != 1:
            return super()._outcome(i, raw, reward, terminated, truncated, info)
        dist = self.reach_distance(i)
        if dist < REACH_RADIUS:
            return 1.0, True, False, True
        # the cube knocked out of the workspace (gym-hil terminates; pressing the gripper into it can
        # launch it metres away): the episode is cut, not ended, and the penalty stays bounded, so
        # knocking it away is never a shortcut out of the per-step penalty
        knocked = bool(terminated and not info.get(self.success_key, False))
        return -min(dist, REACH_MAX_PENALTY), False, bool(truncated or knocked), False

    def _obs_one(self, i: int, raw: dict) -> dict:
        u = self.envs[i].unwrapped
        agent = np.asarray(raw['agent_pos'], np.float32).copy()
        agent[14] = agent[14] / 255.0  # gripper command units -> [0, 1]
        cube = np.asarray(u._data.sensor('block_pos').data, np.float32)
        full = np.concatenate([agent, cube]).astype(np.float32)
        out = {'states': full[:PROPRIO_DIM].copy(), 'privileged_states': full} if self.pixels else {'states': full}
        if self.image_obs:
            out['main_images'] = np.asarray(raw['pixels']['front'], np.uint8)
            out['extra_view_images'] = np.asarray(raw['pixels']['wrist'], np.uint8)[None]
        return out


def sim_env_from_params(p: dict, env_rank: int = ENV.env_rank) -> SimFrankaVecEnv:
    """The env node's sim env from its parameters (the node and ``--in-process`` share it).
    ``state_split`` '' keeps gym-hil's fixed start; a parameter left out keeps the env node's default."""
    p = resolve(ENV_NODE, p)
    split = p['state_split']
    table = StateIdTable(p['state_seed'], p['num_train_states'], p['num_eval_states']) if split else None
    num_envs = p['num_envs']
    return SimFrankaVecEnv(num_envs, p['image_obs'], p['image_size'], p['seed'], p['max_episode_steps'], states=table,
                           state_split=split or ENV.state_split, env_offset=env_rank * num_envs,
                           total_envs=num_envs * p['num_env_nodes'], task_id=p['task_id'], observation=p['observation'])


class GymSimFranka(gym.Env):
    """One sim env as a plain gymnasium env (no auto-reset; ``is_success`` in the step info):
    what stable-baselines3 and other single-process libraries train on, on the same task,
    rewards and state ids as the env node (``bench/bench_learning.py``'s anchor). Observation:
    the 21 ``states``; action: 7 floats in [-1, 1]."""

    def __init__(self, env_index: int, total_envs: int, task_id: int, max_episode_steps: int,
                 states: Optional[StateIdTable] = None, seed: int = ENV.seed):
        self.vec = SimFrankaVecEnv(1, seed=seed + env_index, max_episode_steps=max_episode_steps,
                                   states=states or StateIdTable(), env_offset=env_index, total_envs=total_envs,
                                   task_id=task_id)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        return self.vec._reset_one(0)['states'], {}

    def step(self, action):
        v = self.vec
        raw, r, te, tr, info = v.envs[0].step(v._act(0, np.asarray(action, np.float32)))
        r, te, tr, success = v._outcome(0, raw, r, te, tr, info)
        return v._obs_one(0, raw)['states'], float(r), bool(te), bool(tr), {'is_success': success}

    def close(self) -> None:
        self.vec.close()
