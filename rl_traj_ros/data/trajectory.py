"""``Trajectory``: time-major tensors of one source (or actor) over E epochs of L chunks (spec §4).

The time layout lives in ``Trajectory.from_steps``; boundary fields (``dones``,
``terminations``, ``truncations``, ``prev_values``) hold ``T+E`` entries (each epoch's
state before its first chunk, then after every chunk); ``chunk_starts``/``chunk_ends`` slice
them in one place.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Optional, Sequence

import torch

from ..params.defaults import ENV
from .identity import TrajectoryId
from .schema import MalformedPartError, TrajectoryKey
from .tree import tree_cat, tree_map, tree_stack

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
    num_epochs: int = ENV.num_epochs
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


__all__ = ['Trajectory', 'chunk_starts', 'chunk_ends']
