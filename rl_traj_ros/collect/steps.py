"""From one joined chunk to one resolved step (spec §4).

Cross-part semantics (reward composition, interventions, transitions) live in
``TrajectoryStep.from_parts``; the accumulator only keeps steps; ``Trajectory.from_steps``
lays them out in time. A new field therefore touches the type that owns it, never the
collector's control flow.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

import torch

from ..params.defaults import COLLECTOR
from ..data.schema import EnvTransition, MalformedPartError, RewardConfig, TrajectoryKey
from .joiner import JoinedChunk

RLT_KEYS = ('z_rl', 'proprio', 'ref_chunk')

@dataclass
class CollectConfig:
    """What the learner wants materialised from each chunk."""

    reward: RewardConfig = field(default_factory=RewardConfig)
    collect_transitions: bool = COLLECTOR.collect_transitions
    collect_forward_inputs: bool = True

def _flat_actions(a: torch.Tensor) -> torch.Tensor:
    return a.reshape(a.shape[0], -1)

@dataclass
class TrajectoryStep:
    """One fully resolved chunk for one source: the unit the accumulator keeps."""

    key: TrajectoryKey
    actions: torch.Tensor                 # [B, C*A]
    rewards: torch.Tensor                 # [B, C]
    dones: torch.Tensor                   # [B, C]
    terminations: torch.Tensor
    truncations: torch.Tensor
    intervene_flags: torch.Tensor         # [B, C*A]
    prev_logprobs: torch.Tensor
    prev_values: torch.Tensor             # [B, 1]
    versions: torch.Tensor
    initial: Optional[EnvTransition] = None      # chunk 0 only
    final_prev_values: Optional[torch.Tensor] = None
    forward_inputs: Optional[dict] = None
    curr_obs: Optional[dict] = None
    next_obs: Optional[dict] = None
    rlt: Optional[dict] = None            # curr_* and next_* RLT features

    @classmethod
    def from_parts(cls, chunk: JoinedChunk, cfg: CollectConfig) -> 'TrajectoryStep':
        pol, env = chunk.policy, chunk.env
        tr = env.transition
        rows, c = tr.rewards.shape
        actions = _flat_actions(pol.actions).clone()
        if actions.shape[1] % c:
            raise MalformedPartError(f'actions width {actions.shape[1]} of {chunk.key.as_tuple()} is not a multiple '
                                     f'of the {c} chunk slots in the env transition (wrong chunk count)')
        a_dim = actions.shape[1] // c
        if tr.intervene_actions.shape[1] != c * a_dim:
            raise MalformedPartError(f'intervene_actions width {tr.intervene_actions.shape[1]} != C*A = {c * a_dim}')
        # Flagged slots executed the expert's action: that is what the learner must see.
        flags = env_flags = tr.intervene_flags.to(torch.bool).repeat_interleave(a_dim, dim=1)
        actions = torch.where(flags, tr.intervene_actions.to(actions.dtype), actions)
        out = pol.output
        if out is not None and out.intervene_flags is not None:
            flags = out.intervene_flags.to(torch.bool).repeat_interleave(a_dim, dim=1)
        if out is not None:
            logp, values, versions = out.prev_logprobs, out.prev_values, out.versions
            fwd = {k: v for k, v in out.forward_inputs.items() if k != 'model_action'}
        else:
            logp = torch.zeros(rows, c * a_dim)
            values = torch.zeros(rows, 1)
            versions = torch.full((rows, c), -1, dtype=torch.int64)
            fwd = {}
        fwd['action'] = actions
        rlt = None
        if env.next_rlt_obs is not None:
            rlt = {f'curr_{k}': fwd[k] for k in RLT_KEYS if k in fwd}
            rlt.update({f'next_{k}': v for k, v in env.next_rlt_obs.items()})
            if 'curr_ref_chunk' in rlt:  # the expert's action on intervened slots, the reference elsewhere
                ref = rlt['curr_ref_chunk']
                if ref.numel() != actions.numel():
                    raise MalformedPartError(f'forward_inputs/ref_chunk of {chunk.key.as_tuple()} has shape '
                                             f'{tuple(ref.shape)}, expected {rows} x {c * a_dim} action entries')
                rlt['curr_ref_chunk'] = torch.where(env_flags, actions, ref.reshape(actions.shape).to(actions.dtype)
                                                    ).reshape(ref.shape)
        return cls(
            key=chunk.key, actions=actions, rewards=tr.compute_rewards(cfg.reward, env.bootstrap_values),
            dones=tr.dones.to(torch.bool), terminations=tr.terminations.to(torch.bool),
            truncations=tr.truncations.to(torch.bool), intervene_flags=flags,
            prev_logprobs=logp, prev_values=values.to(torch.float32), versions=versions,
            initial=env.initial_transition, final_prev_values=env.final_prev_values,
            forward_inputs=fwd if cfg.collect_forward_inputs else None,
            curr_obs=_tensors_only(pol.obs) if cfg.collect_transitions else None,
            next_obs=_tensors_only(env.next_obs) if cfg.collect_transitions else None, rlt=rlt)

def _tensors_only(obs: Optional[dict]) -> Optional[dict]:
    """curr_obs/next_obs are dicts of tensors: per-env strings (task_descriptions) stay out."""
    if obs is None:
        return None
    out = {}
    for k, v in obs.items():
        if isinstance(v, dict):
            sub = _tensors_only(v)
            if sub:
                out[k] = sub
        elif isinstance(v, torch.Tensor):
            out[k] = v
    return out

class TrajectoryAccumulator:
    """Keeps completed steps of one scope in rollout order; knows nothing of their fields."""

    def __init__(self) -> None:
        self._steps: dict[TrajectoryKey, TrajectoryStep] = {}

    def append(self, step: TrajectoryStep) -> None:
        if step.key in self._steps:
            raise MalformedPartError(f'step {step.key.as_tuple()} accumulated twice')
        self._steps[step.key] = step

    def __len__(self) -> int:
        return len(self._steps)

    def keys(self) -> list[TrajectoryKey]:
        return list(self._steps)

    def take(self, keys: Iterable[TrajectoryKey]) -> list[TrajectoryStep]:
        return [self._steps.pop(k) for k in keys]


__all__ = ['CollectConfig', 'TrajectoryStep', 'TrajectoryAccumulator']
