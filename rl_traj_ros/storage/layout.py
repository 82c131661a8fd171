"""The storage layout of one trajectory: ``[T, B, ...]`` fields flattened time-major to rows.

A ``Trajectory``'s boundary fields ([T+E, B, ...]) are aligned to chunks on the way in, so
every stored row is a complete transition, and restored exactly on the way out.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from ..data.identity import TrajectoryId
from ..data.schema import TrajectoryKey
from ..data.trajectory import Trajectory

TrajectoryLike = Union[Trajectory, dict]

# -- flattening ---------------------------------------------------------------------------------
def flatten_trajectory(traj: TrajectoryLike) -> tuple[dict[str, torch.Tensor], list[int], int]:
    """[T, B, ...] fields -> [T*B, ...] (time-major), plus [T, B] and the max episode length.

    A ``Trajectory``'s boundary fields ([T+E, B, ...]) are aligned to chunks first: each
    chunk keeps its post-chunk ``dones``/``terminations``/``truncations``, its ``prev_values``
    V(s_t), and gains ``next_values`` V(s_t+1), so every row is a complete transition.
    """
    if isinstance(traj, Trajectory):
        fields = _chunk_aligned(traj)
    elif isinstance(traj, dict):
        fields = dict(traj)
    else:
        raise TypeError(f'expected a Trajectory or a dict of [T, B, ...] tensors, got {type(traj).__name__}')
    if not fields:
        raise ValueError('trajectory has no fields')
    t_b = None
    for k, v in fields.items():
        if not isinstance(v, torch.Tensor) or v.dim() < 2:
            raise ValueError(f'trajectory field {k!r} must be a tensor of shape [T, B, ...]')
        if t_b is None:
            t_b = list(v.shape[:2])
        elif list(v.shape[:2]) != t_b:
            raise ValueError(f'trajectory field {k!r} has leading shape {list(v.shape[:2])}, expected {t_b}')
    t, b = t_b
    # views where possible: the buffer copies them once, into the cache arena or a clone of its own
    flat = {k: v.detach().to('cpu').reshape(t * b, *v.shape[2:]) for k, v in fields.items()}
    return flat, t_b, _max_episode_length(fields.get('dones'), t)

def _chunk_aligned(traj: Trajectory) -> dict[str, torch.Tensor]:
    e, l = traj.num_epochs, traj.chunks_per_epoch
    after = torch.tensor([ep * (l + 1) + 1 + c for ep in range(e) for c in range(l)])
    before = after - 1
    out = {}
    for name, v in traj.to_dict().items():
        if name in ('dones', 'terminations', 'truncations'):
            out[name] = v.index_select(0, after)
        elif name == 'prev_values':
            out[name] = v.index_select(0, before)
            out['next_values'] = v.index_select(0, after)
        elif isinstance(v, torch.Tensor):
            out[name] = v
    return out

def trajectory_from_stored(flat: dict[str, torch.Tensor], shape: Sequence[int], keys: Sequence[TrajectoryKey],
                           identity: Optional[TrajectoryId] = None) -> Trajectory:
    """Inverse of the storage layout (``flatten_trajectory`` of a ``Trajectory``): ``[T*B, ...]``
    rows back to time-major fields and chunk-aligned boundaries back to ``[T+E, B, ...]``
    (``prev_values`` exactly, from each chunk's V(s_t) and the last chunk's V(s_t+1)). The done
    flags before an epoch's first chunk are not stored and come back False: no estimator reads
    them (they take each chunk's end)."""
    t, b = int(shape[0]), int(shape[1])
    e = max(len({k.epoch_id for k in keys}), 1)
    l = t // e
    fields = {k: v.reshape(t, b, *v.shape[1:]) for k, v in flat.items()}
    nxt = fields.pop('next_values', None)
    if nxt is None:
        raise ValueError('stored trajectory has no next_values: it was not written from a Trajectory')
    for name in ('dones', 'terminations', 'truncations', 'prev_values'):
        v = fields[name]
        parts = []
        for ep in range(e):
            chunk = v[ep * l:(ep + 1) * l]
            if name == 'prev_values':
                parts += [chunk, nxt[(ep + 1) * l - 1:(ep + 1) * l]]
            else:
                parts += [torch.zeros_like(chunk[:1]), chunk]
        fields[name] = torch.cat(parts)
    traj = Trajectory.from_dict(fields, e, list(keys))
    traj.identity = identity
    return traj

def _max_episode_length(dones: Optional[torch.Tensor], t: int) -> int:
    if dones is None:
        return t
    d = dones.reshape(dones.shape[0], dones.shape[1], -1).any(-1)  # [T, B]
    best = 0
    for b in range(d.shape[1]):
        run = 0
        for x in d[:, b].tolist():
            run += 1
            if x:
                best, run = max(best, run), 0
        best = max(best, run)
    return best


__all__ = ['TrajectoryLike', 'flatten_trajectory', 'trajectory_from_stored']
