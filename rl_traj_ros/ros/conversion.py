"""Core objects <-> rl_traj_ros messages, exact and with as few payload copies as rclpy allows.

Tensors travel as raw bytes (``uint8[]``) plus dtype and shape: assigning ``bytes`` to a
``uint8[]`` field is one memcpy, while assigning a numpy array walks it element by element
(~165 ms/MB, see shared/research/rclpy-throughput.md). On receipt ``np.frombuffer`` wraps the
field's ``array.array`` without copying, and ``torch.from_numpy`` shares that memory.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from ..params.defaults import POLICY
from ..data.schema import (ActionChunk, EnvPart, EnvTransition, MalformedPartError, PolicyInput, PolicyOutput,
                           PolicyPart, TrajectoryKey, TrajectorySource)
from .. import msg as M
from ..data.identity import TrajectoryId
from ..data.trajectory import Trajectory

ArrayLike = Union[torch.Tensor, np.ndarray]


class MalformedMessageError(MalformedPartError):
    """A message cannot be decoded; the text names the offending field."""


_NP = {'bool': np.bool_, 'uint8': np.uint8, 'int8': np.int8, 'int16': np.int16, 'int32': np.int32,
       'int64': np.int64, 'uint16': np.uint16, 'uint32': np.uint32, 'uint64': np.uint64,
       'float16': np.float16, 'float32': np.float32, 'float64': np.float64, 'bfloat16': np.int16}
_TORCH_NAME = {torch.bool: 'bool', torch.uint8: 'uint8', torch.int8: 'int8', torch.int16: 'int16',
               torch.int32: 'int32', torch.int64: 'int64', torch.uint16: 'uint16', torch.uint32: 'uint32',
               torch.uint64: 'uint64', torch.float16: 'float16', torch.bfloat16: 'bfloat16',
               torch.float32: 'float32', torch.float64: 'float64'}
DTYPES = tuple(_NP)


# -- tensors ------------------------------------------------------------------------------------
def _as_numpy(x: ArrayLike) -> tuple[np.ndarray, str]:
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.device.type != 'cpu':
            x = x.cpu()
        if x.dtype not in _TORCH_NAME:
            raise TypeError(f'unsupported tensor dtype {x.dtype}')
        name = _TORCH_NAME[x.dtype]
        x = x.contiguous()
        return (x.view(torch.int16) if name == 'bfloat16' else x).numpy(), name
    arr = np.ascontiguousarray(x)
    name = arr.dtype.name
    if name not in _NP or name == 'bfloat16':
        raise TypeError(f'unsupported array dtype {arr.dtype}')
    if arr.dtype.byteorder == '>':
        arr = arr.astype(arr.dtype.newbyteorder('<'))
    return arr, name


@functools.cache
def zero_copy_assignment() -> bool:
    """Whether this rclpy's C converter takes a numpy buffer in ``Tensor._data`` unchanged.

    The generated setter of a ``uint8[]`` field copies (``array.array('B', value)``), so the
    public path costs tobytes() + that copy. The private slot skips both; the C side reads
    any buffer-protocol object. It is private API, so it is used only if a serialize round
    trip proves it right on this installation (once, at the first encode), and the public
    setter is the fallback.
    """
    try:
        from rclpy.serialization import deserialize_message, serialize_message
        probe = np.arange(300, dtype=np.uint8)
        m = M.Tensor(name='probe', dtype='uint8', shape=[300])
        m._data = probe
        back = deserialize_message(serialize_message(m), M.Tensor)
        return bytes(back.data) == probe.tobytes()
    except Exception:  # noqa: BLE001 - any failure means: use the public setter
        return False


def to_tensor_msg(x: ArrayLike, name: str = '', out: Optional[M.Tensor] = None) -> M.Tensor:
    """Encode without copying the payload in Python when the installation allows it.

    On the zero-copy path the message references the tensor's memory until it is
    published (publish() serializes synchronously): do not mutate the tensor in between.
    """
    arr, dtype = _as_numpy(x)
    m = out if out is not None else M.Tensor()
    m.name = name
    m.dtype = dtype
    m.shape = arr.shape
    if zero_copy_assignment():
        m._data = arr.reshape(-1).view(np.uint8)
    else:
        m.data = arr.tobytes()
    return m


def from_tensor_msg(m: M.Tensor, field: str = 'tensor', as_numpy: bool = False) -> ArrayLike:
    """Zero-copy view of the message payload (shares memory with ``m.data``)."""
    where = f'{field} ({m.name})' if m.name else field
    if m.dtype not in _NP:
        raise MalformedMessageError(f'{where}: unknown dtype {m.dtype!r}; expected one of {DTYPES}')
    shape = tuple(int(s) for s in m.shape)
    np_dtype = np.dtype(_NP[m.dtype])
    expected = math.prod(shape) * np_dtype.itemsize
    if len(m.data) != expected:
        raise MalformedMessageError(f'{where}: {len(m.data)} data bytes do not match shape {shape} of '
                                    f'{m.dtype} ({expected} bytes)')
    arr = np.frombuffer(m.data, dtype=np_dtype).reshape(shape) if expected else np.zeros(shape, np_dtype)
    if m.dtype == 'bool' and arr.size and arr.view(np.uint8).max() > 1:
        raise MalformedMessageError(f'{where}: bool data holds bytes other than 0/1')
    if as_numpy:
        return arr
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if m.dtype == 'bfloat16' else t


# -- dicts --------------------------------------------------------------------------------------
def to_dict_msg(tree: Optional[Mapping[str, Any]], out: Optional[M.TensorDict] = None) -> M.TensorDict:
    m = out if out is not None else M.TensorDict()
    tensors, strings = [], []

    def visit(node: Mapping[str, Any], prefix: str) -> None:
        for k, v in node.items():
            if '/' in str(k):
                raise ValueError(f"dict key {k!r} may not contain '/' (it separates nesting levels)")
            name = f'{prefix}/{k}' if prefix else str(k)
            if isinstance(v, Mapping):
                visit(v, name)
            elif isinstance(v, (torch.Tensor, np.ndarray)):
                tensors.append(to_tensor_msg(v, name))
            elif isinstance(v, (list, tuple)):
                strings.append(_strings_to_msg(v, name))
            elif v is not None:
                raise TypeError(f'field {name!r}: cannot encode {type(v).__name__}')

    visit(tree or {}, '')
    m.tensors = tensors
    m.strings = strings
    return m


def _strings_to_msg(v: Sequence, name: str) -> M.StringList:
    shape, flat, level = [], [], v
    while isinstance(level, (list, tuple)):
        shape.append(len(level))
        level = level[0] if len(level) else None
    def walk(x, depth):
        if depth == len(shape):
            if not isinstance(x, str):
                raise TypeError(f'field {name!r}: list leaves must be str, got {type(x).__name__}')
            flat.append(x)
            return
        if not isinstance(x, (list, tuple)) or len(x) != shape[depth]:
            raise ValueError(f'field {name!r}: ragged string list')
        for y in x:
            walk(y, depth + 1)
    walk(v, 0)
    return M.StringList(name=name, shape=shape, values=flat)


def _strings_from_msg(m: M.StringList, field: str) -> list:
    shape = [int(s) for s in m.shape]
    if math.prod(shape) != len(m.values):
        raise MalformedMessageError(f'{field} ({m.name}): {len(m.values)} strings do not match shape {shape}')
    def build(values, dims):
        if len(dims) <= 1:
            return list(values)
        step = math.prod(dims[1:])
        return [build(values[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0])]
    return build(list(m.values), shape or [len(m.values)])


def from_dict_msg(m: M.TensorDict, field: str = 'dict') -> dict:
    out: dict = {}
    entries = [(t.name, t, True) for t in m.tensors] + [(s.name, s, False) for s in m.strings]
    for name, item, is_tensor in entries:
        if not name:
            raise MalformedMessageError(f'{field}: entry without a name')
        parts = name.split('/')
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise MalformedMessageError(f'{field}: {name!r} nests under a non-dict entry')
        if parts[-1] in node:
            raise MalformedMessageError(f'{field}: duplicate entry {name!r}')
        node[parts[-1]] = from_tensor_msg(item, f'{field}/{name}') if is_tensor else _strings_from_msg(item, f'{field}/{name}')
    return out


# -- identity -----------------------------------------------------------------------------------
def key_to_msg(k: TrajectoryKey) -> M.TrajectoryKey:
    return M.TrajectoryKey(step_id=k.step_id, epoch_id=k.epoch_id, env_rank=k.env_rank, stage_id=k.stage_id,
                           chunk_id=k.chunk_id)


def key_from_msg(m: M.TrajectoryKey) -> TrajectoryKey:
    return TrajectoryKey(int(m.step_id), int(m.epoch_id), int(m.env_rank), int(m.stage_id), int(m.chunk_id))


def sources_to_msg(sources: Sequence[TrajectorySource]) -> list[M.TrajectorySource]:
    return [M.TrajectorySource(key=key_to_msg(s.key), size=s.size, offset=s.offset) for s in sources]


def sources_from_msg(ms: Sequence[M.TrajectorySource], field: str = 'sources') -> list[TrajectorySource]:
    if not ms:
        raise MalformedMessageError(f'{field}: missing (no TrajectorySource)')
    try:
        return [TrajectorySource(key_from_msg(s.key), int(s.size), int(s.offset)) for s in ms]
    except MalformedPartError as e:
        raise MalformedMessageError(f'{field}: {e}') from None


# -- parts --------------------------------------------------------------------------------------
_TR_FIELDS = ('rewards', 'dones', 'terminations', 'truncations', 'intervene_actions', 'intervene_flags')


def _required(m: M.Tensor, field: str) -> torch.Tensor:
    if not m.dtype:
        raise MalformedMessageError(f'{field}: required tensor is missing (empty dtype)')
    return from_tensor_msg(m, field)


def transition_to_msg(t: EnvTransition) -> M.EnvTransition:
    m = M.EnvTransition()
    for f in _TR_FIELDS:
        to_tensor_msg(getattr(t, f), f, getattr(m, f))
    m.has_reward_model_output = t.reward_model_output is not None
    if t.reward_model_output is not None:
        to_tensor_msg(t.reward_model_output, 'reward_model_output', m.reward_model_output)
    return m


def transition_from_msg(m: M.EnvTransition, field: str) -> EnvTransition:
    vals = {f: _required(getattr(m, f), f'{field}.{f}') for f in _TR_FIELDS}
    rm = _required(m.reward_model_output, f'{field}.reward_model_output') if m.has_reward_model_output else None
    return EnvTransition(**vals, reward_model_output=rm)


def policy_part_to_msg(p: PolicyPart, model_version: int = POLICY.model_version) -> M.PolicyPart:
    m = M.PolicyPart()
    m.sources = sources_to_msg(p.sources)
    to_dict_msg(p.obs, m.obs)
    m.model_version = int(model_version)
    if p.output is not None:
        m.has_output = True
        o, mo = p.output, m.output
        to_dict_msg(o.forward_inputs, mo.forward_inputs)
        to_tensor_msg(o.prev_logprobs, 'prev_logprobs', mo.prev_logprobs)
        to_tensor_msg(o.prev_values, 'prev_values', mo.prev_values)
        to_tensor_msg(o.versions, 'versions', mo.versions)
        mo.has_intervene_flags = o.intervene_flags is not None
        if o.intervene_flags is not None:
            to_tensor_msg(o.intervene_flags, 'intervene_flags', mo.intervene_flags)
    if p.external_actions is not None:
        m.has_external_actions = True
        to_tensor_msg(p.external_actions, 'external_actions', m.external_actions)
    return m


def policy_part_from_msg(m: M.PolicyPart) -> PolicyPart:
    f = 'PolicyPart'
    out = None
    if m.has_output:
        mo = m.output
        out = PolicyOutput(from_dict_msg(mo.forward_inputs, f'{f}.output.forward_inputs'),
                           _required(mo.prev_logprobs, f'{f}.output.prev_logprobs'),
                           _required(mo.prev_values, f'{f}.output.prev_values'),
                           _required(mo.versions, f'{f}.output.versions'),
                           _required(mo.intervene_flags, f'{f}.output.intervene_flags') if mo.has_intervene_flags else None)
    ext = _required(m.external_actions, f'{f}.external_actions') if m.has_external_actions else None
    part = PolicyPart(sources_from_msg(m.sources, f'{f}.sources'), from_dict_msg(m.obs, f'{f}.obs'), out, ext)
    _validate(part, f)
    return part


def env_part_to_msg(p: EnvPart) -> M.EnvPart:
    m = M.EnvPart()
    m.sources = sources_to_msg(p.sources)
    m.transition = transition_to_msg(p.transition)
    m.requires_inference = bool(p.requires_inference)
    for name in ('next_obs', 'next_rlt_obs'):
        v = getattr(p, name)
        setattr(m, f'has_{name}', v is not None)
        if v is not None:
            to_dict_msg(v, getattr(m, name))
    for name in ('bootstrap_values', 'final_prev_values'):
        v = getattr(p, name)
        setattr(m, f'has_{name}', v is not None)
        if v is not None:
            to_tensor_msg(v, name, getattr(m, name))
    m.has_initial_transition = p.initial_transition is not None
    if p.initial_transition is not None:
        m.initial_transition = transition_to_msg(p.initial_transition)
    return m


def env_part_from_msg(m: M.EnvPart, field: str = 'EnvPart') -> EnvPart:
    part = EnvPart(
        sources_from_msg(m.sources, f'{field}.sources'),
        transition_from_msg(m.transition, f'{field}.transition'),
        next_obs=from_dict_msg(m.next_obs, f'{field}.next_obs') if m.has_next_obs else None,
        requires_inference=bool(m.requires_inference),
        next_rlt_obs=from_dict_msg(m.next_rlt_obs, f'{field}.next_rlt_obs') if m.has_next_rlt_obs else None,
        bootstrap_values=_required(m.bootstrap_values, f'{field}.bootstrap_values') if m.has_bootstrap_values else None,
        final_prev_values=_required(m.final_prev_values, f'{field}.final_prev_values') if m.has_final_prev_values else None,
        initial_transition=transition_from_msg(m.initial_transition, f'{field}.initial_transition')
        if m.has_initial_transition else None)
    _validate(part, field)
    return part


def _validate(part: Any, field: str) -> None:
    try:
        part.validate()
    except MalformedPartError as e:
        raise MalformedMessageError(f'{field}: {e}') from None


def policy_input_to_msg(p: PolicyInput) -> M.PolicyInput:
    m = M.PolicyInput()
    m.sources = sources_to_msg(p.sources)
    to_dict_msg(p.obs, m.obs)
    m.has_env_part = p.env_part is not None
    if p.env_part is not None:
        m.env_part = env_part_to_msg(p.env_part)
    return m


def policy_input_from_msg(m: M.PolicyInput) -> PolicyInput:
    # A terminal request (end of the run) carries no new key, only the attached EnvPart.
    sources = sources_from_msg(m.sources, 'PolicyInput.sources') if m.sources else []
    return PolicyInput(sources, from_dict_msg(m.obs, 'PolicyInput.obs'),
                       env_part_from_msg(m.env_part, 'PolicyInput.env_part') if m.has_env_part else None)


def action_chunk_to_msg(a: ActionChunk) -> M.ActionChunk:
    m = M.ActionChunk(sources=sources_to_msg(a.sources), model_version=int(a.model_version))
    to_tensor_msg(a.actions, 'actions', m.actions)
    return m


def action_chunk_from_msg(m: M.ActionChunk) -> ActionChunk:
    return ActionChunk(sources_from_msg(m.sources, 'ActionChunk.sources'),
                       _required(m.actions, 'ActionChunk.actions'), int(m.model_version))


def trajectory_to_msg(t: Trajectory) -> M.Trajectory:
    """What it is travels once, as its identity; the message adds only the layout (epochs)."""
    m = M.Trajectory(num_epochs=int(t.num_epochs))
    m.keys = [key_to_msg(k) for k in t.keys]
    if t.identity is not None:
        m.identity = identity_to_msg(t.identity)
    to_dict_msg(t.as_tree(), m.fields)
    return m


def identity_to_msg(i: TrajectoryId) -> M.TrajectoryId:
    return M.TrajectoryId(run_id=i.run_id, mode=i.mode, step_id=i.step_id, epoch_id=i.epoch_id, env_rank=i.env_rank,
                          stage_id=i.stage_id, actor_rank=i.actor_rank, micro_batch=i.micro_batch, shard=i.shard,
                          episode_id=i.episode_id, row_env_ranks=[r[0] for r in i.rows],
                          row_stage_ids=[r[1] for r in i.rows], row_envs=[r[2] for r in i.rows])


def identity_from_msg(m: M.TrajectoryId, field: str = 'identity') -> Optional[TrajectoryId]:
    """None for an unset identity (empty mode): a producer that does not name its rows."""
    if not m.mode:
        return None
    ranks, stages, envs = list(m.row_env_ranks), list(m.row_stage_ids), list(m.row_envs)
    if not len(ranks) == len(stages) == len(envs):
        raise MalformedMessageError(f'{field}: row_env_ranks/row_stage_ids/row_envs have different lengths '
                                    f'({len(ranks)}, {len(stages)}, {len(envs)})')
    try:
        return TrajectoryId(m.run_id, m.mode, int(m.step_id), int(m.epoch_id), int(m.env_rank), int(m.stage_id),
                            int(m.actor_rank), int(m.micro_batch), int(m.shard), int(m.episode_id),
                            tuple(zip(ranks, stages, envs)))
    except MalformedPartError as e:
        raise MalformedMessageError(f'{field}: {e}') from None


def trajectory_from_msg(m: M.Trajectory) -> Trajectory:
    if m.num_epochs < 1:
        raise MalformedMessageError('Trajectory.num_epochs: must be >= 1')
    fields = from_dict_msg(m.fields, 'Trajectory.fields')
    try:
        t = Trajectory.from_dict(fields, int(m.num_epochs), [key_from_msg(k) for k in m.keys])
    except (MalformedPartError, TypeError) as e:
        raise MalformedMessageError(f'Trajectory.fields: {e}') from None
    for name, v in t.to_dict().items():
        if isinstance(v, torch.Tensor) and (v.dim() < 2 or v.shape[1] != t.num_envs):
            raise MalformedMessageError(f'Trajectory.fields/{name}: shape {tuple(v.shape)} has no env dim of '
                                        f'{t.num_envs}')
    t.identity = identity_from_msg(m.identity, 'Trajectory.identity')
    if t.identity is not None and len(t.identity.rows) != t.num_envs:
        raise MalformedMessageError(f'Trajectory.identity: names {len(t.identity.rows)} env rows, the fields have '
                                    f'{t.num_envs}')
    return t
