"""Exact message round trips and clear errors for malformed messages (no DDS needed)."""
import numpy as np
import pytest
import torch

from rl_traj_ros import msg as M
from rl_traj_ros.collect.collector import TrajectoryCollector, TrajectoryPlan
from rl_traj_ros.data.schema import ActionChunk, PolicyInput, TrajectoryKey
from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
from rl_traj_ros.data.tree import tree_equal
from rl_traj_ros.ros import conversion as cv
from rclpy.serialization import deserialize_message, serialize_message

TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                torch.bfloat16, torch.float32, torch.float64]


def wire(m):
    """Through the real CDR serializer, as DDS would carry it."""
    return deserialize_message(serialize_message(m), type(m))


@pytest.mark.parametrize('dtype', TORCH_DTYPES)
@pytest.mark.parametrize('shape', [(), (0,), (3, 0, 2), (5,), (2, 3, 4)])
def test_tensor_round_trip_exact(dtype, shape):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=g) * 100).to(dtype) if dtype != torch.bool else torch.rand(shape, generator=g) > .5
    back = cv.from_tensor_msg(wire(cv.to_tensor_msg(x, 'x')))
    assert back.dtype == x.dtype and back.shape == x.shape
    assert torch.equal(back, x)


def test_numpy_round_trip_and_zero_copy_read():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    m = wire(cv.to_tensor_msg(x, 'arr'))
    back = cv.from_tensor_msg(m, as_numpy=True)
    np.testing.assert_array_equal(back, x)
    # the decoded array is a view of the message buffer, not a copy
    back[0, 0, 0] = 42.0
    assert np.frombuffer(m.data, np.float32)[0] == 42.0


def test_nested_dict_round_trip_with_names():
    obs = {'main_images': torch.randint(0, 255, (2, 4, 4, 3), dtype=torch.uint8),
           'extra_view_images': torch.randint(0, 255, (2, 2, 4, 4, 3), dtype=torch.uint8),
           'states': torch.randn(2, 8), 'task_descriptions': ['pick', 'place'],
           'nested': {'a': torch.ones(2, 1, dtype=torch.int64), 'b': {'c': torch.zeros(2)}},
           'stacked_text': [['a', 'b'], ['c', 'd'], ['e', 'f']]}
    back = cv.from_dict_msg(wire(cv.to_dict_msg(obs)))
    assert tree_equal(back, obs)


def _parts(**kw):
    spec = SyntheticSpec(image_hw=(16, 16), with_reward_model=True, **kw)
    return list(make_parts(spec))


def test_part_round_trips_are_exact():
    for pol, env in _parts():
        pol2 = cv.policy_part_from_msg(wire(cv.policy_part_to_msg(pol)))
        env2 = cv.env_part_from_msg(wire(cv.env_part_to_msg(env)))
        assert pol2.sources == pol.sources and env2.sources == env.sources
        assert tree_equal(pol2.obs, pol.obs)
        assert tree_equal(pol2.output.forward_inputs, pol.output.forward_inputs)
        for f in ('prev_logprobs', 'prev_values', 'versions'):
            assert torch.equal(getattr(pol2.output, f), getattr(pol.output, f))
        for f in ('rewards', 'dones', 'terminations', 'truncations', 'intervene_actions', 'intervene_flags',
                  'reward_model_output'):
            assert torch.equal(getattr(env2.transition, f), getattr(env.transition, f))
        assert (env2.initial_transition is None) == (env.initial_transition is None)
        assert (env2.final_prev_values is None) == (env.final_prev_values is None)
        if env.final_prev_values is not None:
            assert torch.equal(env2.final_prev_values, env.final_prev_values)
        req = PolicyInput(pol.sources, pol.obs, env)
        req2 = cv.policy_input_from_msg(wire(cv.policy_input_to_msg(req)))
        assert tree_equal(req2.obs, req.obs) and torch.equal(req2.env_part.transition.rewards, env.transition.rewards)
        act = ActionChunk(pol.sources, pol.actions, 7)
        act2 = cv.action_chunk_from_msg(wire(cv.action_chunk_to_msg(act)))
        assert torch.equal(act2.actions, act.actions) and act2.model_version == 7


def test_external_actions_part_round_trip():
    pol, _ = _parts()[0]
    pol.external_actions, pol.output = pol.actions, None
    back = cv.policy_part_from_msg(wire(cv.policy_part_to_msg(pol)))
    assert back.output is None and torch.equal(back.external_actions, pol.external_actions)


def test_trajectory_round_trip():
    plan = TrajectoryPlan(num_epochs=2, chunks_per_epoch=3, sources=[(0, 0), (1, 0)], envs_per_source=2)
    plan.collect.collect_transitions = True
    col = TrajectoryCollector(plan)
    outs = []
    for pol, env in _parts():
        outs += col.push(pol) + col.push(env)
    assert len(outs) == 2
    for o in outs:
        m = wire(cv.trajectory_to_msg(o.trajectory))
        t = cv.trajectory_from_msg(m)
        assert t.keys == o.trajectory.keys and t.num_epochs == 2
        assert tree_equal(t.to_dict(), o.trajectory.to_dict())
        assert t.identity == o.trajectory.identity and t.identity is not None


# -- malformed input ----------------------------------------------------------------------------
def test_unknown_dtype_names_field():
    m = cv.to_tensor_msg(torch.zeros(2), 'states')
    m.dtype = 'complex128'
    with pytest.raises(cv.MalformedMessageError, match=r"obs/states.*unknown dtype 'complex128'"):
        cv.from_tensor_msg(m, 'obs/states')


def test_byte_count_mismatch_names_field():
    pol, _ = _parts()[0]
    m = cv.policy_part_to_msg(pol)
    m.output.prev_values.data = bytes(3)
    with pytest.raises(cv.MalformedMessageError, match=r'PolicyPart.output.prev_values.*3 data bytes'):
        cv.policy_part_from_msg(m)


def test_missing_required_field():
    _, env = _parts()[0]
    m = cv.env_part_to_msg(env)
    m.transition.rewards = M.Tensor()
    with pytest.raises(cv.MalformedMessageError, match=r'EnvPart.transition.rewards.*missing'):
        cv.env_part_from_msg(m)
    m = cv.env_part_to_msg(env)
    m.sources = []
    with pytest.raises(cv.MalformedMessageError, match=r'EnvPart.sources.*missing'):
        cv.env_part_from_msg(m)


def test_wrong_shapes_and_both_outputs_rejected():
    pol, env = _parts()[0]
    m = cv.policy_part_to_msg(pol)
    cv.to_tensor_msg(torch.zeros(5, 1), 'prev_values', m.output.prev_values)
    with pytest.raises(cv.MalformedMessageError, match=r'prev_values has shape \(5, 1\)'):
        cv.policy_part_from_msg(m)
    m = cv.policy_part_to_msg(pol)
    m.has_external_actions = True
    cv.to_tensor_msg(pol.actions, 'external_actions', m.external_actions)
    with pytest.raises(cv.MalformedMessageError, match='exactly one of output / external_actions'):
        cv.policy_part_from_msg(m)


def test_bad_bool_bytes_and_bad_strings():
    m = cv.to_tensor_msg(torch.zeros(3, dtype=torch.bool), 'flags')
    m.data = bytes([0, 2, 1])
    with pytest.raises(cv.MalformedMessageError, match='bool data'):
        cv.from_tensor_msg(m, 'flags')
    d = cv.to_dict_msg({'task_descriptions': ['a', 'b']})
    d.strings[0].shape = [3]
    with pytest.raises(cv.MalformedMessageError, match='task_descriptions.*2 strings do not match'):
        cv.from_dict_msg(d, 'obs')


def test_key_arity():
    with pytest.raises(ValueError, match='needs 5 values'):
        TrajectoryKey.from_tuple((0, 1, 2))
    with pytest.raises(ValueError, match='chunk_id must be a non-negative int'):
        TrajectoryKey(0, 0, 0, 0, -1)
