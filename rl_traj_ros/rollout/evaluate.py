"""Held-out evaluation: a policy on the sim's evaluation state ids, no ROS, no exploration.

Why its own loop: evaluation needs neither the data path nor the learner, only the env on
state ids the learner never trained on (``state_split: eval``) and the policy's mean action;
the same evaluator scores the package's actor-critic and the stable-baselines3 anchor
(``bench/bench_learning.py``), so both are measured on the same states in the same way.
Every env walks its own stride through the eval ids, so ``num_episodes`` <= the number of
eval ids scores each id at most once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..envs.sim_franka import sim_env_from_params
from ..params.defaults import POLICY

Act = Callable[[dict], np.ndarray]  # the env's observation ('states' [B, S], cameras) -> actions [B, C*A]


def evaluate(act: Act, env_params: dict, num_episodes: int, chunk: int, split: str = 'eval',
             step_reward=None) -> dict:
    """Run ``act`` (executing ``chunk`` actions per call) on held-out state ids until
    ``num_episodes`` episodes ended; success rate, return and length per episode. ``split`` ''
    scores gym-hil's fixed start instead (the fixed-cube variant of a task). An episode succeeded
    when the sim's check passed at any of its steps. ``step_reward`` (``rewards.step_reward``, as
    the env node builds it) decides the episodes' ends as in training: with the sim's reward
    withheld an episode goes on past the sim's success until the success classifier (its
    threshold and hold) calls it, so each episode also records what the learned reward said
    (``judged``): judged and not succeeded is reward hacking, succeeded and not judged a miss."""
    env = sim_env_from_params({**env_params, 'state_split': split, 'num_env_nodes': 1}, 0)
    env.step_reward = step_reward
    try:
        obs, _ = env.reset()
        b = env.num_envs
        ret, length, won = np.zeros(b), np.zeros(b, int), np.zeros(b, bool)
        episodes: list[dict] = []
        while len(episodes) < num_episodes:
            actions = np.asarray(act(obs), np.float32).reshape(b, chunk, -1)
            for s in range(chunk):
                ids = list(env.state_ids)  # the episode's own id (a done env resets inside step)
                obs, r, term, trunc, info = env.step(actions[:, s])
                ret += r
                length += 1
                won |= np.asarray(info.get('true_success', info['success']), bool)
                for i in np.nonzero(term | trunc)[0]:
                    episodes.append({'state_id': ids[i], 'success': bool(won[i]), 'return': float(ret[i]),
                                     'length': int(length[i]), 'judged': bool(info['success'][i])})
                    ret[i], length[i], won[i] = 0.0, 0, False
    finally:
        env.close()
    episodes = episodes[:num_episodes]
    return {'episodes': len(episodes), 'success_rate': float(np.mean([e['success'] for e in episodes])),
            'mean_return': float(np.mean([e['return'] for e in episodes])),
            'mean_length': float(np.mean([e['length'] for e in episodes])),
            'state_ids': sorted({e['state_id'] for e in episodes}), 'per_episode': episodes}


def actor_critic_act(model) -> Act:
    """The package's actor-critic as an evaluator policy: its mean action chunk."""
    def act(obs: dict) -> np.ndarray:
        actions, _, _ = model.act({'states': torch.from_numpy(np.asarray(obs['states'], np.float32))},
                                  deterministic=True)
        return actions.numpy()
    return act


def sac_actor_act(model) -> Act:
    """An RLPD actor (``policies.sac.SquashedGaussianActor``) as an evaluator policy: its mean
    action chunk, squashed and scaled; it sees the cameras when it was trained on them (rendered
    by the evaluation env as in training)."""
    def act(obs: dict) -> np.ndarray:
        given = {k: torch.from_numpy(np.asarray(obs[k])) for k in ('main_images', 'extra_view_images') if k in obs}
        with torch.no_grad():
            actions, _ = model.sample({'states': torch.from_numpy(np.asarray(obs['states'], np.float32)), **given},
                                      deterministic=True)
        return actions.numpy()
    return act


def load_actor_critic(path: str | Path, p: dict):
    """An ActorCritic of the policy node's shape ``p`` with the weights of ``path``: a learner
    checkpoint (``learner_checkpoint.pt`` or its directory) or a plain state_dict file; loaded
    with ``weights_only=True`` (no code runs from the file)."""
    from ..learning.base import CHECKPOINT
    from ..policies.actor_critic import ActorCritic
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT
    state = torch.load(path, map_location='cpu', weights_only=True)
    model = ActorCritic(p['state_dim'], p['action_dim'], p['chunk'], p['hidden'], seed=p.get('seed', POLICY.seed))
    model.load_state_dict(state['model'] if 'model' in state and isinstance(state['model'], dict) else state)
    return model.eval(), int(state.get('version', 0))
