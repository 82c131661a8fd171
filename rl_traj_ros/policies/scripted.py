"""Scripted expert for gym-hil's pick-cube task, so demos can be collected without a human.

Works on the env node's ``states`` vector: agent_pos (q[7], dq[7], gripper[1], tcp[3]) followed
by the cube position[3]. Stateless (the phase is read from the state), so it can plan a chunk
of C actions from one observation by rolling its own target forward.
"""
from __future__ import annotations

import numpy as np

from ..params.defaults import POLICY

TCP, GRIP, CUBE = slice(15, 18), 14, slice(18, 21)


class PickCubeExpert:
    def __init__(self, max_step: float = 0.025, hover: float = 0.06, lift_height: float = 0.2,
                 grasp_width: float = 0.6, noise: float = 0.0, seed: int = POLICY.seed):
        self.max_step, self.hover, self.lift_height = max_step, hover, lift_height
        self.grasp_width = grasp_width
        self.noise = noise
        self.rng = np.random.default_rng(seed)

    def act(self, state: np.ndarray) -> np.ndarray:
        tcp, cube = state[TCP].astype(np.float64), state[CUBE].astype(np.float64)
        a = np.zeros(7, np.float32)
        xy_err = cube[:2] - tcp[:2]
        if self._grasped(state):  # lift
            target = np.array([tcp[0], tcp[1], cube[2] + self.lift_height])
            a[6] = 1.0
        elif np.linalg.norm(xy_err) > 0.012:  # hover above the cube, gripper open
            target = np.array([cube[0], cube[1], max(tcp[2], cube[2] + self.hover)])
            a[6] = -1.0
        elif tcp[2] - cube[2] > 0.008:  # descend
            target = np.array([cube[0], cube[1], cube[2]])
            a[6] = -1.0
        else:  # close
            target = tcp
            a[6] = 1.0
        d = target - tcp
        n = np.linalg.norm(d)
        if n > self.max_step:
            d *= self.max_step / n
        a[:3] = d
        if self.noise:
            a[:3] += self.rng.normal(0, self.noise, 3)
        return a

    def _grasped(self, s: np.ndarray) -> bool:
        return float(s[GRIP]) > self.grasp_width and np.linalg.norm(s[CUBE] - s[TCP]) < 0.04

    def act_chunk(self, state: np.ndarray, chunk: int) -> np.ndarray:
        """C actions from one state, rolling a simple model forward: the TCP reaches each
        intermediate target, the gripper command integrates, a grasped cube moves with the TCP."""
        s = state.astype(np.float64).copy()
        out = []
        for _ in range(chunk):
            a = self.act(s)
            out.append(a)
            held = self._grasped(s)
            s[TCP] = s[TCP] + a[:3]
            if held:
                s[CUBE] = s[CUBE] + a[:3]
            s[GRIP] = np.clip(s[GRIP] + a[6], 0.0, 1.0)
        return np.stack(out)
