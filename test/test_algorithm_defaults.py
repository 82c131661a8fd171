"""Each algorithm's defaults from one place (params/): a learner node started with nothing but
``algorithm:=rlpd`` trains RLPD with RLPD's discount, gradient clip, width and target entropy,
not PPO's; the policy node's 'sac' actor has the RLPD learner's width."""
import math

import rclpy
from rcl_interfaces.srv import DescribeParameters, GetParameters
from rclpy.executors import SingleThreadedExecutor

from rl_traj_ros.params.learner_node import LEARNER_NODE
from rl_traj_ros.params.policy_node import POLICY_NODE
from rl_traj_ros.params.spec import resolve
from rosutil import ros_process, spin_until

RLPD = {'gamma': 0.97, 'max_grad_norm': 10.0, 'hidden': 256}
PPO = {'gamma': 0.99, 'max_grad_norm': 0.5, 'hidden': 128}


def test_resolve_picks_the_algorithms_defaults():
    for algorithm, want in (('rlpd', RLPD), ('ppo', PPO)):
        p = resolve(LEARNER_NODE, {'algorithm': algorithm})
        assert {k: p[k] for k in want} == want, algorithm
    assert {k: resolve(LEARNER_NODE, {})[k] for k in PPO} == PPO  # the spec's own default algorithm
    assert resolve(LEARNER_NODE, {'algorithm': 'rlpd', 'gamma': 0.9})['gamma'] == 0.9  # given wins
    assert resolve(POLICY_NODE, {'policy': 'sac'})['hidden'] == 256
    assert resolve(POLICY_NODE, {'policy': 'mlp'})['hidden'] == 128
    assert '0.97 for rlpd' in LEARNER_NODE['gamma'].describe()


def test_learners_built_without_a_yaml_use_their_own_defaults():
    from rl_traj_ros.assembly import make_learner, make_policy_worker
    rlpd = make_learner({'algorithm': 'rlpd'})
    cfg = rlpd.updater.cfg
    assert (cfg.gamma, cfg.grad_clip, cfg.target_entropy) == (0.97, 10.0, None)
    assert rlpd.updater.target_entropy == -7 * 4 / 2  # -|A|/2 over the chunk's entries
    assert rlpd.updater.actor.mean.in_features == 256
    assert make_policy_worker({"policy": "sac"}).model.mean.in_features == 256  # acts with the learner's shape
    zero = make_learner({'algorithm': 'rlpd', 'target_entropy': 0.0})
    assert zero.updater.target_entropy == 0.0  # a target of 0 is a target, not 'automatic'
    ppo = make_learner({})
    assert (ppo.cfg.gamma, ppo.updater.cfg.max_grad_norm) == (0.99, 0.5)


def test_learner_node_started_with_only_the_algorithm_declares_rlpds_defaults():
    with ros_process(['-m', 'rl_traj_ros.nodes.learner_node', '--ros-args', '-p', 'algorithm:=rlpd'],
                     ready_line='learner ready', timeout=60):
        ctx = rclpy.Context()
        rclpy.init(context=ctx)
        node = rclpy.create_node('param_reader', context=ctx)
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        try:
            names = ['gamma', 'max_grad_norm', 'hidden', 'target_entropy']
            get = node.create_client(GetParameters, '/learner_node/get_parameters')
            assert get.wait_for_service(timeout_sec=20)
            fut = get.call_async(GetParameters.Request(names=names))
            assert spin_until(ex, fut.done, 20)
            v = fut.result().values
            got = {'gamma': v[0].double_value, 'max_grad_norm': v[1].double_value, 'hidden': v[2].integer_value}
            assert got == RLPD and math.isnan(v[3].double_value)
            desc = node.create_client(DescribeParameters, '/learner_node/describe_parameters')
            assert desc.wait_for_service(timeout_sec=20)
            fut = desc.call_async(DescribeParameters.Request(names=['gamma']))
            assert spin_until(ex, fut.done, 20)
            assert '0.97 for rlpd' in fut.result().descriptors[0].description  # ros2 param describe says so
        finally:
            ex.shutdown()
            node.destroy_node()
            ctx.try_shutdown()


def test_both_learners_satisfy_the_learner_protocol_and_building_models_leaves_the_global_rng():
    import torch
    from rl_traj_ros.learning.base import Learner
    from rl_traj_ros.assembly import make_learner
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    learners = [make_learner({}), make_learner({'algorithm': 'rlpd'})]
    assert torch.equal(torch.rand(3), want)  # seeded initialisation does not reseed the caller's RNG
    assert all(isinstance(x, Learner) for x in learners)
    again = make_learner({'algorithm': 'rlpd'})  # the same seed: the same actor and critics in any process
    for a, b in ((learners[1].updater.actor, again.updater.actor), (learners[1].updater.critics, again.updater.critics)):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_nodes_parameters_are_typed_frozen_and_refused_by_name():
    import pickle
    from array import array

    import pytest
    from rl_traj_ros.params.env_node import ENV_NODE
    p = resolve(LEARNER_NODE, {'algorithm': 'rlpd', 'lr': 1, 'sac_action_scale': [1, 0.5]})
    assert (p.lr, type(p.lr), p['gamma'], p.sac_action_scale) == (1.0, float, 0.97, [1.0, 0.5])  # YAML 1 for 1.0
    with pytest.raises(AttributeError, match="read-only: 'lr'"):
        p.lr = 0.1
    with pytest.raises(TypeError):
        p['lr'] = 0.1
    assert p.replace(lr=0.5).lr == 0.5 and p.lr == 1.0 and pickle.loads(pickle.dumps(p)).gamma == 0.97
    with pytest.raises(ValueError, match=r"parameter 'num_updates' must be int \(its default is 0\), got float 2.5"):
        resolve(LEARNER_NODE, {'num_updates': 2.5})
    with pytest.raises(ValueError, match="parameter 'use_images' must be bool"):
        resolve(LEARNER_NODE, {'use_images': 'yes'})
    with pytest.raises(ValueError, match=r"parameter 'camera_names\[1\]' must be str"):
        resolve(LEARNER_NODE, {'camera_names': ['front', 2]})
    with pytest.raises(ValueError, match=r"'lr' = 2.0 is outside its range \[0.0, 1.0\]"):
        resolve(LEARNER_NODE, {'lr': 2})
    env = resolve(ENV_NODE, {'workspace_min': array('d', [0.1, -0.2, 0.0]), 'from_the_shared_section': 1})
    assert env.workspace_min == [0.1, -0.2, 0.0] and env['from_the_shared_section'] == 1  # rclpy's number arrays
