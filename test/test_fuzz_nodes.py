"""Bad input: every subscriber of the real node processes is fuzzed with malformed messages
(hypothesis). Each is rejected with a counted, logged reason; no node crashes; a valid chunk
sent afterwards is still stored; a part whose other half never comes is reported and dropped."""
import copy
import time

import pytest
import rclpy
from hypothesis import HealthCheck, given, settings, strategies as st
from rclpy.executors import SingleThreadedExecutor

from rl_traj_ros import msg as M
from rl_traj_ros import srv as S
from rl_traj_ros.collect.collector import TrajectoryCollector, TrajectoryPlan
from rl_traj_ros.data.schema import PolicyInput
from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
from rl_traj_ros.ros import conversion as cv
from rl_traj_ros.ros.qos import DATA_QOS

from rosutil import ros_process, spin_until, wait_matched

SPEC = SyntheticSpec(num_epochs=1, chunks_per_epoch=1, sources=((0, 0),), envs_per_source=2, chunk=4,
                     action_dim=7, state_dim=21)
COMMON = ['-p', 'num_epochs:=1', '-p', 'chunks_per_epoch:=1', '-p', 'num_envs:=2', '-p', 'chunk:=4']


@pytest.fixture(scope='module')
def nodes(tmp_path_factory):
    out = tmp_path_factory.mktemp('fuzz')
    with ros_process(['-m', 'rl_traj_ros.nodes.replay_buffer_writer_node', '--ros-args', '-p',
                      f'output_dir:={out}/buf']) as w, \
            ros_process(['-m', 'rl_traj_ros.nodes.trajectory_collector_node', '--ros-args', *COMMON,
                         '-p', 'pending_timeout_s:=3.0']) as c, \
            ros_process(['-m', 'rl_traj_ros.nodes.policy_node', '--ros-args', *COMMON]) as p:
        ctx = rclpy.Context()
        rclpy.init(context=ctx)
        node = rclpy.create_node('fuzzer', context=ctx)
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        pubs = {name: node.create_publisher(t, f'/rl_traj/{name}', DATA_QOS) for name, t in
                [('policy_part', M.PolicyPart), ('env_part', M.EnvPart), ('trajectory', M.Trajectory),
                 ('policy_input', M.PolicyInput)]}
        assert wait_matched(ex, list(pubs.values()), 30)
        yield node, ex, pubs, {'writer': w, 'collector': c, 'policy': p}, out
        ex.shutdown()
        node.destroy_node()
        ctx.try_shutdown()


def stats(node, ex, service):
    cli = node.create_client(S.GetStats, service)
    assert cli.wait_for_service(timeout_sec=10)
    fut = cli.call_async(S.GetStats.Request())
    spin_until(ex, fut.done, 10)
    node.destroy_client(cli)
    r = fut.result()
    return dict(zip(r.names, r.values))


def valid():
    (pol, env), = make_parts(SPEC)
    plan = TrajectoryPlan(num_epochs=1, chunks_per_epoch=1, sources=[(0, 0)], envs_per_source=2)
    col = TrajectoryCollector(plan)
    col.push(pol)
    traj = col.push(env)[0].trajectory
    return {'policy_part': cv.policy_part_to_msg(pol), 'env_part': cv.env_part_to_msg(env),
            'trajectory': cv.trajectory_to_msg(traj), 'policy_input': cv.policy_input_to_msg(PolicyInput(pol.sources, pol.obs))}


def tensors_of(m):
    """Every Tensor inside a message (depth-first)."""
    out = []
    if isinstance(m, M.Tensor):
        return [m] if m.dtype else []
    for f in m.get_fields_and_field_types():
        v = getattr(m, f)
        if isinstance(v, list):
            for x in v:
                if hasattr(x, 'get_fields_and_field_types'):
                    out += tensors_of(x)
        elif hasattr(v, 'get_fields_and_field_types'):
            out += tensors_of(v)
    return out


MUTATIONS = ['dtype', 'bytes', 'shape', 'no_sources', 'key', 'absurd']


@st.composite
def malformed(draw):
    target = draw(st.sampled_from(['policy_part', 'env_part', 'trajectory', 'policy_input']))
    m = copy.deepcopy(BASE[target])
    kind = draw(st.sampled_from(MUTATIONS if target != 'trajectory' else ['dtype', 'bytes', 'shape', 'absurd',
                                                                          'identity']))
    ts = tensors_of(m)
    t = ts[draw(st.integers(0, len(ts) - 1))]
    if kind == 'dtype':
        t.dtype = draw(st.text(min_size=1, max_size=8).filter(lambda s: s not in cv.DTYPES))
    elif kind == 'bytes':
        delta = draw(st.integers(-len(t.data), 64).filter(lambda d: d != 0))
        t.data = bytes(max(0, len(t.data) + delta))
    elif kind == 'shape':
        shape = draw(st.lists(st.integers(0, 9), min_size=0, max_size=4))
        import math
        n = len(t.data) // {'bool': 1, 'uint8': 1, 'int64': 8, 'float32': 4}.get(t.dtype, 1)
        if math.prod(shape) == n:
            shape = shape + [2]
        t.shape = shape
    elif kind == 'identity':  # rows that do not match the fields, or row arrays of different lengths
        extra = draw(st.integers(1, 3))
        m.identity.row_envs = list(m.identity.row_envs) + [7] * extra
        if draw(st.booleans()):
            m.identity.row_env_ranks = list(m.identity.row_env_ranks) + [0] * extra
            m.identity.row_stage_ids = list(m.identity.row_stage_ids) + [0] * extra
    elif kind == 'no_sources':
        m.sources = []
    elif kind == 'key':
        m.sources[0].key.chunk_id = draw(st.integers(5, 2 ** 31))  # outside the plan / a training step
        if target == 'policy_input':
            m.sources[0].size = 0
    else:  # absurd sizes
        t.shape = [2 ** 40, 2 ** 20]
    return target, m


BASE = None


def test_fuzzed_messages_are_counted_and_nodes_survive(nodes):
    global BASE
    node, ex, pubs, procs, out = nodes
    BASE = valid()
    sent = {k: 0 for k in pubs}

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(malformed())
    def fuzz(case):
        target, m = case
        pubs[target].publish(m)
        sent[target] += 1
        ex.spin_once(timeout_sec=0.01)

    fuzz()
    to_collector = sent['policy_part'] + sent['env_part']

    def counted():
        c = stats(node, ex, '/trajectory_collector_node/get_stats')
        w = stats(node, ex, '/replay_buffer_writer_node/get_stats')
        return (c['decode_errors'] + c['rejected'] == to_collector and
                w['decode_errors'] + w['rejected'] == sent['trajectory'])
    deadline = time.time() + 30
    while not counted() and time.time() < deadline:
        time.sleep(0.5)
    c = stats(node, ex, '/trajectory_collector_node/get_stats')
    w = stats(node, ex, '/replay_buffer_writer_node/get_stats')
    print(f'\nsent {sent}; collector {c}; writer {w}')
    assert c['decode_errors'] + c['rejected'] == to_collector > 0
    assert w['decode_errors'] + w['rejected'] == sent['trajectory'] > 0 and w['stored'] == 0
    assert all(p.poll() is None for p in procs.values()), 'a node crashed'
    # a valid chunk afterwards is joined, flushed and stored: other keys are unaffected
    pubs['policy_part'].publish(BASE['policy_part'])
    pubs['env_part'].publish(BASE['env_part'])
    assert spin_until(ex, lambda: stats(node, ex, '/replay_buffer_writer_node/get_stats')['stored'] == 1, 30)


def test_missing_half_is_reported_after_the_timeout(nodes):
    node, ex, pubs, procs, out = nodes
    (pol, _), = make_parts(SyntheticSpec(**{**SPEC.__dict__, 'step_id': 7}))
    before = stats(node, ex, '/trajectory_collector_node/get_stats')['expired']
    pubs['policy_part'].publish(cv.policy_part_to_msg(pol))  # its EnvPart never comes
    assert spin_until(ex, lambda: stats(node, ex, '/trajectory_collector_node/get_stats')['expired'] == before + 1, 30)
    assert stats(node, ex, '/trajectory_collector_node/get_stats')['pending_keys'] == 0
    assert procs['collector'].poll() is None
