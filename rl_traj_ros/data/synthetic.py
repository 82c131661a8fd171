"""Deterministic synthetic rollouts: the same parts for tests, benchmarks and smoke runs.

A seeded generator stands in for env and policy so that any consumer (in-process core,
ROS pipeline, replay buffer) can be checked tensor-for-tensor against the same ground truth.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import torch

from ..params.defaults import ENV
from .schema import (EnvPart, EnvTransition, PolicyOutput, PolicyPart, TrajectoryKey,
                          TrajectorySource)


@dataclass
class SyntheticSpec:
    num_epochs: int = 2
    chunks_per_epoch: int = 3
    sources: tuple = ((0, 0), (1, 0))
    envs_per_source: int = 2
    chunk: int = 2          # C
    action_dim: int = ENV.action_dim     # A
    state_dim: int = 8
    image_hw: Optional[tuple[int, int]] = None  # (H, W) for main_images / extra_view_images
    num_extra_views: int = 1
    step_id: int = 0
    seed: int = ENV.seed
    done_prob: float = 0.2
    intervene_prob: float = 0.2
    with_reward_model: bool = False
    keep_next_obs: bool = True  # the policy node keeps next_obs when transitions are collected


def _obs(g: torch.Generator, spec: SyntheticSpec, rows: int) -> dict:
    obs = {'states': torch.randn(rows, spec.state_dim, generator=g),
           'task_descriptions': [f'pick the cube #{int(x)}' for x in torch.randint(0, 9, (rows,), generator=g)]}
    if spec.image_hw is not None:
        h, w = spec.image_hw
        obs['main_images'] = torch.randint(0, 256, (rows, h, w, 3), generator=g, dtype=torch.uint8)
        obs['extra_view_images'] = torch.randint(0, 256, (rows, spec.num_extra_views, h, w, 3), generator=g,
                                                 dtype=torch.uint8)
    return obs


def make_parts(spec: SyntheticSpec) -> Iterator[tuple[PolicyPart, EnvPart]]:
    """Yield (PolicyPart, completed EnvPart) per key in rollout order."""
    g = torch.Generator().manual_seed(spec.seed)
    b, c, a = spec.envs_per_source, spec.chunk, spec.action_dim
    for epoch in range(spec.num_epochs):
        # obs[l] is what request l carries; obs[L] the epoch's final observation.
        obs = {src: [_obs(g, spec, b) for _ in range(spec.chunks_per_epoch + 1)] for src in spec.sources}
        for chunk_id in range(spec.chunks_per_epoch):
            for (env_rank, stage_id) in spec.sources:
                key = TrajectoryKey(spec.step_id, epoch, env_rank, stage_id, chunk_id)
                src = [TrajectorySource(key, b, 0)]
                action = torch.rand(b, c * a, generator=g) * 2 - 1
                out = PolicyOutput({'action': action, 'model_action': action.clone()},
                                   prev_logprobs=torch.randn(b, c * a, generator=g),
                                   prev_values=torch.randn(b, 1, generator=g),
                                   versions=torch.full((b, c), 3, dtype=torch.int64))
                pol = PolicyPart(src, obs[(env_rank, stage_id)][chunk_id], output=out)
                dones = torch.rand(b, c, generator=g) < spec.done_prob
                term = dones & (torch.rand(b, c, generator=g) < 0.5)
                trunc = dones & ~term
                tr = EnvTransition(rewards=torch.rand(b, c, generator=g), dones=dones, terminations=term,
                                   truncations=trunc,
                                   intervene_actions=torch.rand(b, c * a, generator=g) * 2 - 1,
                                   intervene_flags=torch.rand(b, c, generator=g) < spec.intervene_prob,
                                   reward_model_output=torch.rand(b, c, generator=g) if spec.with_reward_model else None)
                # A terminal chunk overrides next_obs with the pre-reset observation (the next
                # request already shows the reset one); the epoch's last chunk and terminal chunks
                # need a value for the bootstrap.
                last = chunk_id == spec.chunks_per_epoch - 1
                terminal = bool(dones.any())
                env = EnvPart(src, tr, next_obs=_obs(g, spec, b) if terminal else None,
                              requires_inference=last or terminal,
                              initial_transition=EnvTransition.zeros(b, c, a) if chunk_id == 0 else None)
                values = torch.randn(b, 1, generator=g) if (last or terminal) else None
                yield pol, env.complete(next_obs=obs[(env_rank, stage_id)][chunk_id + 1], values=values,
                                        keep_next_obs=spec.keep_next_obs)


def stored_cells(buffer_dir) -> list:
    """Every (chunk key, env row) a replay-buffer directory holds, read from its index alone
    (each entry's TrajectoryId and keys): what exactly-once audits count."""
    from .identity import TrajectoryId
    index = json.loads((Path(buffer_dir) / 'trajectory_index.json').read_text())
    cells = []
    for i in index['trajectory_ids']:
        e = index['trajectories'][str(i)]
        cells += TrajectoryId.from_json(e['identity']).cells([TrajectoryKey.from_tuple(k) for k in e['keys']])
    return cells
