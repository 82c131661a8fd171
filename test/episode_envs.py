"""A small deterministic env with a ground-truth log, for episode-recording tests."""
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ScriptedEnv(gym.Env):
    """Episode k of env `idx` lasts lengths[k % len] steps; outcome in outcomes[k % len]:
    'success' (terminated, info success), 'fail' (terminated, no success), 'trunc' (truncated)."""
    metadata = {'render_modes': []}

    def __init__(self, idx=0, lengths=(3,), outcomes=('success',), hw=8, log=None):
        self.idx, self.lengths, self.outcomes, self.hw = idx, lengths, outcomes, hw
        self.observation_space = spaces.Dict({
            'main_images': spaces.Box(0, 255, (hw, hw, 3), np.uint8),
            'extra_view_images': spaces.Box(0, 255, (2, hw, hw, 3), np.uint8),
            'states': spaces.Box(-np.inf, np.inf, (4,), np.float32)})
        self.action_space = spaces.Box(-1, 1, (7,), np.float32)
        self.log = log if log is not None else []
        self.k, self.t = -1, 0

    def _obs(self):
        v = (self.idx * 50 + self.k * 10 + self.t) % 256
        return {'main_images': np.full((self.hw, self.hw, 3), v, np.uint8),
                'extra_view_images': np.stack([np.full((self.hw, self.hw, 3), (v + j + 1) % 256, np.uint8)
                                               for j in range(2)]),
                'states': np.array([self.idx, self.k, self.t, v], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k += 1
        self.t = 0
        obs = self._obs()
        self.rec = {'env': self.idx, 'episode': self.k, 'obs': [obs], 'actions': [], 'rewards': [],
                    'outcome': self.outcomes[self.k % len(self.outcomes)]}
        self.log.append(self.rec)
        return obs, {}

    def step(self, action):
        rec = self.rec
        self.t += 1
        n = self.lengths[self.k % len(self.lengths)]
        last = self.t >= n
        outcome = rec['outcome']
        reward = 1.0 if (last and outcome == 'success') else 0.0
        terminated = last and outcome in ('success', 'fail')
        truncated = last and outcome == 'trunc'
        obs = self._obs()
        rec['obs'].append(obs)
        rec['actions'].append(np.asarray(action, np.float32).copy())
        rec['rewards'].append(reward)
        info = {'success': np.bool_(outcome == 'success' and last)} if last else {}
        return obs, reward, terminated, truncated, info
