"""From joined chunks to time-major training tensors (spec §4).

Cross-part semantics (reward composition, interventions, transitions) live in
``TrajectoryStep.from_parts``; the time layout lives in ``Trajectory.from_steps``; the
accumulator only keeps steps. A new field therefore touches the type that owns it, never
the collector's control flow.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Iterable, Optional, Sequence

import torch

from .joiner import JoinedChunk
from .delivery import TrajectoryId
from .schema import EnvTransition, MalformedPartError, RewardConfig, TrajectoryKey
from .tree import tree_cat, tree_map, tree_stack

RLT_KEYS = ('z_rl', 'proprio', 'ref_chunk')


@dataclass
class CollectConfig:
    """What the learner wants materialised from each chunk."""

    reward: RewardConfig = field(default_factory=RewardConfig)
    collect_transitions: bool = False
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


_TIME_FIELDS = ('actions', 'rewards', 'prev_logprobs', 'versions', 'intervene_flags')
_BOUNDARY_FIELDS = ('dones', 'terminations', 'truncations')
_DICT_FIELDS = ('forward_inputs', 'curr_obs', 'next_obs', 'rlt')


@dataclass
class Trajectory:
    """Time-major tensors of one source (or actor) over ``E`` epochs of ``L`` chunks."""

    actions: torch.Tensor           # [T, B, C*A]
    rewards: torch.Tensor           # [T, B, C]
    prev_logprobs: torch.Tensor     # [T, B, ...]
    versions: torch.Tensor          # [T, B, ...]
    intervene_flags: torch.Tensor   # [T, B, C*A]
    dones: torch.Tensor             # [T+E, B, C]
    terminations: torch.Tensor      # [T+E, B, C]
    truncations: torch.Tensor       # [T+E, B, C]
    prev_values: torch.Tensor       # [T+E, B, 1]
    num_epochs: int = 1
    forward_inputs: Optional[dict] = None
    curr_obs: Optional[dict] = None
    next_obs: Optional[dict] = None
    rlt: Optional[dict] = None
    advantages: Optional[torch.Tensor] = None  # [T, B, 1]
    returns: Optional[torch.Tensor] = None     # [T, B, 1]
    loss_mask: Optional[torch.Tensor] = None   # [T, B, C] (pipeline without auto-reset)
    keys: list[TrajectoryKey] = field(default_factory=list)
    identity: Optional[TrajectoryId] = None    # set by the collector: what the writer dedupes on

    @property
    def chunks_per_epoch(self) -> int:
        return self.actions.shape[0] // self.num_epochs

    @property
    def num_envs(self) -> int:
        return self.actions.shape[1]

    @classmethod
    def from_steps(cls, steps: Sequence[TrajectoryStep], num_epochs: int) -> 'Trajectory':
        if not steps:
            raise ValueError('no steps')
        steps = sorted(steps, key=lambda s: s.key)  # rollout order; identical for any arrival order
        if len(steps) % num_epochs:
            raise MalformedPartError(f'{len(steps)} steps do not fill {num_epochs} epochs')
        chunks = len(steps) // num_epochs
        stacked = {f: torch.stack([getattr(s, f) for s in steps]) for f in _TIME_FIELDS}
        boundary: dict[str, list[torch.Tensor]] = {f: [] for f in _BOUNDARY_FIELDS}
        values: list[torch.Tensor] = []
        for e in range(num_epochs):
            ep = steps[e * chunks:(e + 1) * chunks]
            if [s.key.chunk_id for s in ep] != list(range(chunks)) or len({s.key.epoch_id for s in ep}) != 1:
                raise MalformedPartError(f'epoch {e} does not hold chunks 0..{chunks - 1}: '
                                         f'{[s.key.as_tuple() for s in ep]}')
            init = ep[0].initial
            for f in _BOUNDARY_FIELDS:
                before = getattr(init, f).to(torch.bool) if init is not None else torch.zeros_like(getattr(ep[0], f))
                boundary[f].append(before)
                boundary[f].extend(getattr(s, f) for s in ep)
            values.extend(s.prev_values for s in ep)
            final = ep[-1].final_prev_values
            values.append(final[:, :1].to(torch.float32) if final is not None else torch.zeros_like(ep[-1].prev_values))
        opt = {}
        for f in _DICT_FIELDS:
            present = [getattr(s, f) is not None for s in steps]
            if any(present) and not all(present):
                raise MalformedPartError(f'{f} is present on {sum(present)} of {len(steps)} chunks; a time-major '
                                         'field needs every chunk (complete EnvParts with keep_next_obs)')
            opt[f] = tree_stack([getattr(s, f) for s in steps]) if all(present) else None
        return cls(**stacked, **{f: torch.stack(v) for f, v in boundary.items()},
                   prev_values=torch.stack(values), num_epochs=num_epochs, **opt,
                   keys=[s.key for s in steps])

    def _map_env_dim(self, fn) -> 'Trajectory':
        upd = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor) or isinstance(v, dict):
                upd[f.name] = tree_map(fn, v)
        return replace(self, **upd)

    def select_envs(self, start: int, stop: int) -> 'Trajectory':
        return self._map_env_dim(lambda t: t[:, start:stop] if isinstance(t, torch.Tensor)
                                 else [row[start:stop] for row in t])

    def index_envs(self, index: torch.Tensor) -> 'Trajectory':
        return self._map_env_dim(lambda t: t.index_select(1, index) if isinstance(t, torch.Tensor)
                                 else [[row[i] for i in index.tolist()] for row in t])

    def split(self, num_shards: int) -> list['Trajectory']:
        """Shards along the env dim (spec: a Trajectory per source, split if configured)."""
        b = self.num_envs
        if num_shards <= 0 or b % num_shards:
            raise ValueError(f'cannot split {b} envs into {num_shards} equal shards')
        n = b // num_shards
        return [self.select_envs(i * n, (i + 1) * n) for i in range(num_shards)]

    @staticmethod
    def cat_envs(items: Sequence['Trajectory']) -> 'Trajectory':
        first = items[0]
        upd = {}
        for f in fields(first):
            v = getattr(first, f.name)
            if isinstance(v, torch.Tensor) or isinstance(v, dict):
                upd[f.name] = tree_cat([getattr(t, f.name) for t in items], dim=1)
        upd['keys'] = [k for t in items for k in t.keys]
        return replace(first, **upd)

    def as_tree(self) -> dict:
        """Nested name -> tensor dict of every present field (the wire layout)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if isinstance(getattr(self, f.name), (torch.Tensor, dict))}

    def to_dict(self) -> dict:
        """Flat name -> tensor dict ('/' for nesting): the storage layout."""
        out: dict = {}
        _flatten(self.as_tree(), '', out)
        return out

    @classmethod
    def from_dict(cls, d: dict, num_epochs: int, keys: Optional[list[TrajectoryKey]] = None) -> 'Trajectory':
        nested: dict = {}
        for name, v in d.items():
            parts = name.split('/')
            node = nested
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = v
        known = {f.name for f in fields(cls)}
        unknown = set(nested) - known
        if unknown:
            raise MalformedPartError(f'unknown trajectory fields: {sorted(unknown)}')
        missing = [f for f in _TIME_FIELDS + _BOUNDARY_FIELDS + ('prev_values',) if f not in nested]
        if missing:
            raise MalformedPartError(f'trajectory is missing fields: {missing}')
        return cls(**nested, num_epochs=num_epochs, keys=list(keys or []))


def _flatten(tree: dict, prefix: str, out: dict) -> None:
    for k, v in tree.items():
        name = f'{prefix}/{k}' if prefix else k
        if isinstance(v, dict):
            _flatten(v, name, out)
        else:
            out[name] = v


def chunk_starts(boundary: torch.Tensor, num_epochs: int) -> torch.Tensor:
    """A ``[T+E, ...]`` boundary tensor (``prev_values``, ``dones``) -> ``[T, ...]``: its value
    at the start of each chunk (each epoch's last entry, after its last chunk, dropped)."""
    per = boundary.shape[0] // num_epochs
    return torch.cat([boundary[e * per:(e + 1) * per - 1] for e in range(num_epochs)])


def chunk_ends(boundary: torch.Tensor, num_epochs: int) -> torch.Tensor:
    """A ``[T+E, ...]`` boundary tensor -> ``[T, ...]``: its value at the end of each chunk
    (each epoch's first entry, the one before its first chunk, dropped)."""
    per = boundary.shape[0] // num_epochs
    return torch.cat([boundary[e * per + 1:(e + 1) * per] for e in range(num_epochs)])


def compute_gae(rewards: torch.Tensor, prev_values: torch.Tensor, dones: torch.Tensor, num_epochs: int,
                gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over chunk-level rewards (sum over C) and dones (max over C), per epoch.

    ``rewards [T,B,C]``, ``prev_values [T+E,B,1]``, ``dones [T+E,B,C]`` in the
    ``Trajectory`` layout; returns ``advantages, returns`` of shape ``[T,B,1]``. The one
    implementation both the pipeline collector and the non-pipeline learner path call.
    """
    t_total, b = rewards.shape[:2]
    chunks = t_total // num_epochs
    r = rewards.to(torch.float32).sum(-1)
    d = dones.to(torch.float32).amax(-1)
    v = prev_values.to(torch.float32)[..., 0]
    adv = torch.zeros(t_total, b)
    for e in range(num_epochs):
        rs, ve, de = r[e * chunks:(e + 1) * chunks], v[e * (chunks + 1):(e + 1) * (chunks + 1)], \
            d[e * (chunks + 1):(e + 1) * (chunks + 1)]
        last = torch.zeros(b)
        for t in reversed(range(chunks)):
            nonterminal = 1.0 - de[t + 1]
            delta = rs[t] + gamma * ve[t + 1] * nonterminal - ve[t]
            last = delta + gamma * gae_lambda * nonterminal * last
            adv[e * chunks + t] = last
    values = chunk_starts(v, num_epochs)
    return adv.unsqueeze(-1), (adv + values).unsqueeze(-1)


def compute_loss_mask(dones: torch.Tensor, num_epochs: int) -> torch.Tensor:
    """Valid control steps without auto-reset, as RLinf's loss-mask computation: per epoch and
    env, a step counts until (and including) the env's first done; later steps (the env sat
    finished) are masked. ``dones [T+E, B, C]`` in the Trajectory layout -> ``[T, B, C]`` bool;
    the epoch's ``d_before`` counts as a done before its first step."""
    t_e, b, c = dones.shape
    chunks = t_e // num_epochs - 1
    out = []
    for e in range(num_epochs):
        d = dones[e * (chunks + 1):(e + 1) * (chunks + 1)].to(torch.int64)     # [L+1, B, C]
        flat = d.permute(1, 0, 2).reshape(b, -1)[:, c - 1:]                     # d_before's last slot, then steps
        valid = (flat.cumsum(1) == 0)[:, :-1]                                   # no done strictly before the step
        out.append(valid.reshape(b, chunks, c).permute(1, 0, 2))
    return torch.cat(out)


def masked_normalize(x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """``(x - mean) / sqrt(var + 1e-5)`` with population statistics over the entries where
    ``mask`` is set (all entries without a mask); masked-out entries are left as they were."""
    if mask is None:
        return (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + 1e-5)
    m = mask.to(torch.bool).expand_as(x)
    if not bool(m.any()):
        return x
    sel = x[m]
    mean, var = sel.mean(), sel.var(unbiased=False)
    return torch.where(m, (x - mean) / torch.sqrt(var + 1e-5), x)


def trajectory_advantages(traj: Trajectory, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    return compute_gae(traj.rewards, traj.prev_values, traj.dones, traj.num_epochs, gamma, gae_lambda)


__all__ = ['CollectConfig', 'TrajectoryStep', 'TrajectoryAccumulator', 'Trajectory', 'compute_gae',
           'compute_loss_mask', 'masked_normalize', 'trajectory_advantages']
