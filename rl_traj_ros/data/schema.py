"""The wire-independent data contract of an action chunk (spec §1-2).

An action chunk is produced in two halves by two owners: the policy (``PolicyPart``) and the
env (``EnvPart``). Keeping each half's fields on the type that owns them means a new
algorithm adds a field in one place and the joiner/collector never need to know about it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

import torch

from ..params.defaults import POLICY
from ..params.shared import GAMMA
from .tree import Tree, batch_size, tree_cat, tree_slice

Obs = dict  # nested dict of [B, ...] tensors and per-env string lists


class MalformedPartError(ValueError):
    """A part violates the contract; the message names the offending field."""


@dataclass(frozen=True, order=True)
class TrajectoryKey:
    """Identity of one action chunk, in spec order."""

    step_id: int
    epoch_id: int
    env_rank: int
    stage_id: int
    chunk_id: int

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise MalformedPartError(f'TrajectoryKey.{f.name} must be a non-negative int, got {v!r}')

    @classmethod
    def from_tuple(cls, values: Sequence[int]) -> 'TrajectoryKey':
        if len(values) != 5:
            raise MalformedPartError(
                f'TrajectoryKey needs 5 values (step_id, epoch_id, env_rank, stage_id, chunk_id), got {len(values)}')
        return cls(*(int(v) for v in values))

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        return (self.step_id, self.epoch_id, self.env_rank, self.stage_id, self.chunk_id)

    @property
    def source_id(self) -> tuple[int, int]:
        """The logical source (env_rank, stage_id) that owns the env batch."""
        return (self.env_rank, self.stage_id)


@dataclass(frozen=True)
class TrajectorySource:
    """One routed fragment of a source's batch: ``size`` envs starting at ``offset``."""

    key: TrajectoryKey
    size: int
    offset: int = 0

    def __post_init__(self) -> None:
        if self.size <= 0 or self.offset < 0:
            raise MalformedPartError(f'TrajectorySource size must be > 0 and offset >= 0, got {self.size}, {self.offset}')

    @property
    def end(self) -> int:
        return self.offset + self.size

    def split(self, sizes: Sequence[int]) -> list['TrajectorySource']:
        if sum(sizes) != self.size:
            raise MalformedPartError(f'split sizes {list(sizes)} do not add up to fragment size {self.size}')
        out, off = [], self.offset
        for s in sizes:
            out.append(TrajectorySource(self.key, s, off))
            off += s
        return out

    @staticmethod
    def merge(fragments: Iterable['TrajectorySource']) -> list['TrajectorySource']:
        """Fuse adjacent fragments of the same key (inverse of ``split``), keeping order."""
        out: list[TrajectorySource] = []
        for f in fragments:
            if out and out[-1].key == f.key and out[-1].end == f.offset:
                out[-1] = TrajectorySource(f.key, out[-1].size + f.size, out[-1].offset)
            else:
                out.append(f)
        return out


def _check_rows(name: str, t: Optional[torch.Tensor], rows: int, ndim: Optional[int] = None) -> None:
    if t is None:
        return
    if not isinstance(t, torch.Tensor):
        raise MalformedPartError(f'{name} must be a tensor, got {type(t).__name__}')
    if t.dim() == 0 or t.shape[0] != rows:
        raise MalformedPartError(f'{name} has shape {tuple(t.shape)}, expected {rows} env rows')
    if ndim is not None and t.dim() != ndim:
        raise MalformedPartError(f'{name} has shape {tuple(t.shape)}, expected {ndim} dims')


def _rows_of(sources: Sequence[TrajectorySource]) -> int:
    if not sources:
        raise MalformedPartError('sources is empty')
    return sum(s.size for s in sources)


def _split_by_sources(obj: Any, sources: Sequence[TrajectorySource]) -> list[tuple[TrajectorySource, Any]]:
    out, start = [], 0
    for s in sources:
        out.append((s, obj.slice_rows(start, start + s.size, [s])))
        start += s.size
    return out


def _slice_opt(t: Optional[Tree], a: int, b: int) -> Optional[Tree]:
    return None if t is None else tree_slice(t, a, b)


def _cat_opt(items: Sequence[Optional[Tree]], name: str) -> Optional[Tree]:
    present = [i is not None for i in items]
    if not any(present):
        return None
    if not all(present):
        raise MalformedPartError(f'{name} is present in some fragments only')
    return tree_cat(list(items))


@dataclass
class PolicyOutput:
    """What inference produced; ``forward_inputs['action']`` is the chunk ``[B, C*A]``."""

    forward_inputs: dict
    prev_logprobs: torch.Tensor
    prev_values: torch.Tensor
    versions: torch.Tensor
    intervene_flags: Optional[torch.Tensor] = None

    def validate(self, rows: int) -> None:
        if not isinstance(self.forward_inputs, Mapping) or 'action' not in self.forward_inputs:
            raise MalformedPartError("PolicyOutput.forward_inputs must contain 'action'")
        try:
            n = batch_size(self.forward_inputs, 'forward_inputs')
        except (ValueError, TypeError) as e:
            raise MalformedPartError(str(e)) from None
        if n != rows:
            raise MalformedPartError(f'forward_inputs has {n} env rows, expected {rows}')
        _check_rows('prev_logprobs', self.prev_logprobs, rows)
        _check_rows('prev_values', self.prev_values, rows, 2)
        _check_rows('versions', self.versions, rows)
        _check_rows('intervene_flags', self.intervene_flags, rows, 2)

    def slice_rows(self, a: int, b: int) -> 'PolicyOutput':
        return PolicyOutput(tree_slice(self.forward_inputs, a, b), self.prev_logprobs[a:b],
                            self.prev_values[a:b], self.versions[a:b], _slice_opt(self.intervene_flags, a, b))

    @staticmethod
    def cat(items: Sequence['PolicyOutput']) -> 'PolicyOutput':
        return PolicyOutput(tree_cat([i.forward_inputs for i in items]),
                            torch.cat([i.prev_logprobs for i in items]),
                            torch.cat([i.prev_values for i in items]),
                            torch.cat([i.versions for i in items]),
                            _cat_opt([i.intervene_flags for i in items], 'intervene_flags'))


@dataclass
class PolicyPart:
    """Policy-owned half of a chunk: exactly one of ``output`` / ``external_actions``."""

    sources: list[TrajectorySource]
    obs: Obs
    output: Optional[PolicyOutput] = None
    external_actions: Optional[torch.Tensor] = None

    def validate(self) -> int:
        rows = _rows_of(self.sources)
        if (self.output is None) == (self.external_actions is None):
            raise MalformedPartError('PolicyPart needs exactly one of output / external_actions')
        if self.output is not None:
            self.output.validate(rows)
        _check_rows('external_actions', self.external_actions, rows)
        try:
            n = batch_size(self.obs, 'obs')
        except (ValueError, TypeError) as e:
            raise MalformedPartError(str(e)) from None
        if n is not None and n != rows:
            raise MalformedPartError(f'obs has {n} env rows, expected {rows}')
        return rows

    @property
    def actions(self) -> torch.Tensor:
        return self.output.forward_inputs['action'] if self.output is not None else self.external_actions

    def slice_rows(self, a: int, b: int, sources: list[TrajectorySource]) -> 'PolicyPart':
        return PolicyPart(sources, tree_slice(self.obs, a, b),
                          self.output.slice_rows(a, b) if self.output is not None else None,
                          _slice_opt(self.external_actions, a, b))

    def split_sources(self) -> list[tuple[TrajectorySource, 'PolicyPart']]:
        return _split_by_sources(self, self.sources)

    @staticmethod
    def merge(parts: Sequence['PolicyPart']) -> 'PolicyPart':
        if len(parts) == 1:  # the common unrouted case: nothing to concatenate, no copy
            return parts[0]
        outs = [p.output for p in parts]
        if any(o is None for o in outs) and not all(o is None for o in outs):
            raise MalformedPartError('cannot merge fragments with and without a policy output')
        return PolicyPart(TrajectorySource.merge(s for p in parts for s in p.sources),
                          tree_cat([p.obs for p in parts]),
                          PolicyOutput.cat(outs) if outs[0] is not None else None,
                          _cat_opt([p.external_actions for p in parts], 'external_actions'))


@dataclass
class RewardConfig:
    """How env rewards, a reward model and truncation bootstraps compose (spec §4)."""

    env_reward_weight: float = 1.0
    reward_weight: float = 0.0
    use_reward_model: bool = False
    auto_reset: bool = False
    bootstrap_type: str = 'standard'  # 'standard': truncations only; anything else: any done
    gamma: float = GAMMA


_FLAG_FIELDS = ('dones', 'terminations', 'truncations')


@dataclass
class EnvTransition:
    """What the env saw while executing one chunk of C actions for B envs."""

    rewards: torch.Tensor            # [B, C] float
    dones: torch.Tensor              # [B, C] bool
    terminations: torch.Tensor       # [B, C] bool
    truncations: torch.Tensor        # [B, C] bool
    intervene_actions: torch.Tensor  # [B, C*A]
    intervene_flags: torch.Tensor    # [B, C] bool
    reward_model_output: Optional[torch.Tensor] = None  # [B, C]

    @classmethod
    def zeros(cls, rows: int, chunk: int, action_dim: int) -> 'EnvTransition':
        f = torch.zeros(rows, chunk, dtype=torch.bool)
        return cls(torch.zeros(rows, chunk), f, f.clone(), f.clone(),
                   torch.zeros(rows, chunk * action_dim), f.clone())

    def validate(self, rows: int, name: str = 'transition') -> None:
        _check_rows(f'{name}.rewards', self.rewards, rows, 2)
        c = self.rewards.shape[1]
        for f in _FLAG_FIELDS + ('intervene_flags',):
            t = getattr(self, f)
            _check_rows(f'{name}.{f}', t, rows, 2)
            if t.shape[1] != c:
                raise MalformedPartError(f'{name}.{f} has {t.shape[1]} chunk slots, rewards has {c}')
        _check_rows(f'{name}.intervene_actions', self.intervene_actions, rows, 2)
        if self.intervene_actions.shape[1] % c:
            raise MalformedPartError(f'{name}.intervene_actions width {self.intervene_actions.shape[1]} '
                                     f'is not a multiple of {c} chunk slots')
        _check_rows(f'{name}.reward_model_output', self.reward_model_output, rows, 2)

    @property
    def chunk_size(self) -> int:
        return self.rewards.shape[1]

    def compute_rewards(self, cfg: RewardConfig, bootstrap_values: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Chunk rewards ``[B, C]`` as the learner must see them."""
        r = self.rewards.to(torch.float32)
        if cfg.use_reward_model and self.reward_model_output is not None:
            r = cfg.env_reward_weight * r + cfg.reward_weight * self.reward_model_output.to(torch.float32)
        else:
            r = r.clone()
        if cfg.auto_reset and bootstrap_values is not None:
            # RLinf's terminal mask is the chunk's LAST slot (truncations[:, -1], or dones[:, -1]
            # for the "always" type): the bootstrap value is V(s) after the whole chunk, so an
            # episode truncated in an earlier slot gets no bootstrap here
            ended = self.truncations if cfg.bootstrap_type == 'standard' else self.dones
            ended = ended[:, -1].to(torch.float32)
            r[:, -1] += cfg.gamma * bootstrap_values.reshape(-1).to(torch.float32) * ended
        return r

    def slice_rows(self, a: int, b: int) -> 'EnvTransition':
        return EnvTransition(*(_slice_opt(getattr(self, f.name), a, b) for f in dataclasses.fields(self)))

    @staticmethod
    def cat(items: Sequence['EnvTransition']) -> 'EnvTransition':
        return EnvTransition(*(_cat_opt([getattr(i, f.name) for i in items], f.name)
                               for f in dataclasses.fields(EnvTransition)))


@dataclass
class EnvPart:
    """Env-owned half of a chunk, completed by the policy node before it is published."""

    sources: list[TrajectorySource]
    transition: EnvTransition
    next_obs: Optional[Obs] = None
    requires_inference: bool = False
    next_rlt_obs: Optional[dict] = None
    bootstrap_values: Optional[torch.Tensor] = None
    final_prev_values: Optional[torch.Tensor] = None
    initial_transition: Optional[EnvTransition] = None

    def validate(self) -> int:
        rows = _rows_of(self.sources)
        self.transition.validate(rows)
        if self.initial_transition is not None:
            self.initial_transition.validate(rows, 'initial_transition')
        for name in ('next_obs', 'next_rlt_obs'):
            tree = getattr(self, name)
            if tree is not None:
                try:
                    n = batch_size(tree, name)
                except (ValueError, TypeError) as e:
                    raise MalformedPartError(str(e)) from None
                if n is not None and n != rows:
                    raise MalformedPartError(f'{name} has {n} env rows, expected {rows}')
        _check_rows('bootstrap_values', self.bootstrap_values, rows, 2)
        _check_rows('final_prev_values', self.final_prev_values, rows, 2)
        return rows

    def complete(self, next_obs: Optional[Obs] = None, values: Optional[torch.Tensor] = None,
                 keep_next_obs: bool = False) -> 'EnvPart':
        """Resolve the real next observation and attach terminal values (policy side).

        ``next_obs`` is the observation of the request this part was attached to; an
        explicit ``self.next_obs`` (terminal pre-reset obs, decoupled boundary) overrides it.
        """
        if self.requires_inference and values is None:
            raise MalformedPartError('EnvPart requires terminal inference but no values were given')
        resolved = self.next_obs if self.next_obs is not None else next_obs
        done = dataclasses.replace(self, next_obs=resolved if keep_next_obs else None)
        if values is not None:
            done.final_prev_values = values
            done.bootstrap_values = values[:, :1]
            done.requires_inference = False  # the request is served: nobody may infer again
        return done

    def slice_rows(self, a: int, b: int, sources: list[TrajectorySource]) -> 'EnvPart':
        return EnvPart(sources, self.transition.slice_rows(a, b), _slice_opt(self.next_obs, a, b),
                       self.requires_inference, _slice_opt(self.next_rlt_obs, a, b),
                       _slice_opt(self.bootstrap_values, a, b), _slice_opt(self.final_prev_values, a, b),
                       self.initial_transition.slice_rows(a, b) if self.initial_transition is not None else None)

    def split_sources(self) -> list[tuple[TrajectorySource, 'EnvPart']]:
        return _split_by_sources(self, self.sources)

    @staticmethod
    def merge(parts: Sequence['EnvPart']) -> 'EnvPart':
        if len(parts) == 1:
            return parts[0]
        inits = [p.initial_transition for p in parts]
        if any(i is None for i in inits) and not all(i is None for i in inits):
            raise MalformedPartError('initial_transition is present in some fragments only')
        return EnvPart(TrajectorySource.merge(s for p in parts for s in p.sources),
                       EnvTransition.cat([p.transition for p in parts]),
                       _cat_opt([p.next_obs for p in parts], 'next_obs'),
                       any(p.requires_inference for p in parts),
                       _cat_opt([p.next_rlt_obs for p in parts], 'next_rlt_obs'),
                       _cat_opt([p.bootstrap_values for p in parts], 'bootstrap_values'),
                       _cat_opt([p.final_prev_values for p in parts], 'final_prev_values'),
                       EnvTransition.cat(inits) if inits[0] is not None else None)


@dataclass
class PolicyInput:
    """env -> policy request: current obs under new keys, previous chunk's EnvPart attached."""

    sources: list[TrajectorySource]
    obs: Obs
    env_part: Optional[EnvPart] = None


@dataclass
class ActionChunk:
    """policy -> env reply for the request with ``sources``."""

    sources: list[TrajectorySource]
    actions: torch.Tensor
    model_version: int = POLICY.model_version


__all__ = ['TrajectoryKey', 'TrajectorySource', 'PolicyOutput', 'PolicyPart', 'RewardConfig',
           'EnvTransition', 'EnvPart', 'PolicyInput', 'ActionChunk', 'MalformedPartError', 'Obs']
