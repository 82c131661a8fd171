"""Weight sync over DDS: a learner's PolicyWeights reach a real policy node, which answers from
the next step on with the new weights and stamps their version; in synchronous mode a step
waits for its weights (the previous chunk's EnvPart still goes out at once), a restarted
policy node gets the latest weights (TRANSIENT_LOCAL), and bad weights are refused."""
import torch
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

import rl_traj_ros.msg as M
from rl_traj_ros.data.schema import PolicyInput, TrajectoryKey, TrajectorySource
from rl_traj_ros.learning import weights as W
from rl_traj_ros.policies.actor_critic import ActorCritic
from rl_traj_ros.ros import conversion as cv
from rl_traj_ros.ros.qos import DATA_QOS, WEIGHTS_QOS

from rosutil import ros_process, spin_until, wait_matched

PREFIX = '/weights_test'
POLICY = ['-m', 'rl_traj_ros.nodes.policy_node', '--ros-args', '-p', f'topic_prefix:={PREFIX}', '-p', 'policy:=mlp',
          '-p', 'state_dim:=4', '-p', 'action_dim:=2', '-p', 'chunk:=3', '-p', 'hidden:=16', '-p', 'use_images:=false',
          '-p', 'max_version_lag:=0']


def _request(step, chunk):
    key = TrajectoryKey(step, 0, 0, 0, chunk)
    return cv.policy_input_to_msg(PolicyInput([TrajectorySource(key, 2)], {'states': torch.ones(2, 4) * (chunk + 1)}))


def _weights_msg(state_dict, version, path_dir=None):
    if path_dir is not None:
        path, digest = W.save_file(state_dict, path_dir, version)
        return M.PolicyWeights(model_version=version, sha256=digest, path=str(path))
    data, digest = W.pack(state_dict)
    m = M.PolicyWeights(model_version=version, sha256=digest)
    m.data = data
    return m


def test_weights_answer_from_the_next_step_and_sync_mode_waits_for_them(rclpy_context, tmp_path):
    node = Node('learner_standin', context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    chunks, parts = {}, {}
    node.create_subscription(M.ActionChunk, f'{PREFIX}/action_chunk',
                             lambda m: chunks.__setitem__(cv.key_from_msg(m.sources[0].key).as_tuple(), m), DATA_QOS)
    node.create_subscription(M.PolicyPart, f'{PREFIX}/policy_part',
                             lambda m: parts.__setitem__(cv.key_from_msg(m.sources[0].key).as_tuple(), m), DATA_QOS)
    env_parts = []
    node.create_subscription(M.EnvPart, f'{PREFIX}/env_part', env_parts.append, DATA_QOS)
    req = node.create_publisher(M.PolicyInput, f'{PREFIX}/policy_input', DATA_QOS)
    wpub = node.create_publisher(M.PolicyWeights, f'{PREFIX}/policy_weights', WEIGHTS_QOS)
    base = ActorCritic(4, 2, 3, hidden=16, seed=0).state_dict()  # the policy node's seeded init
    new = {k: v + 0.3 for k, v in base.items()}
    try:
        with ros_process(POLICY):
            assert wait_matched(ex, [req, wpub])
            req.publish(_request(0, 0))
            assert not spin_until(ex, lambda: (0, 0, 0, 0, 0) in chunks, 2.0), 'answered before a learner was up'
            wpub.publish(_weights_msg(base, 0))  # the learner's start-up announcement (its version 0)
            assert spin_until(ex, lambda: (0, 0, 0, 0, 0) in chunks, 20)
            assert chunks[(0, 0, 0, 0, 0)].model_version == 0
            # step 1 in synchronous mode: held until the weights of update 0 -> 1 arrive
            req.publish(_request(1, 0))
            assert not spin_until(ex, lambda: (1, 0, 0, 0, 0) in chunks, 2.0), 'answered without its weights'
            bad = _weights_msg(new, 1)
            bad.sha256 = '0' * 64
            wpub.publish(bad)  # a corrupted transfer is refused; still waiting
            assert not spin_until(ex, lambda: (1, 0, 0, 0, 0) in chunks, 1.5)
            wpub.publish(_weights_msg(new, 1, tmp_path))  # as a file on shared storage
            assert spin_until(ex, lambda: (1, 0, 0, 0, 0) in chunks and (1, 0, 0, 0, 0) in parts, 20), \
                'weights did not release the step'
            got = chunks[(1, 0, 0, 0, 0)]
            assert got.model_version == 1 and parts[(1, 0, 0, 0, 0)].model_version == 1
            from rl_traj_ros.rollout.workers import PolicyWorker
            ref_new = ActorCritic(4, 2, 3, hidden=16, seed=0)
            ref_new.load_state_dict(new)
            want = PolicyWorker(ref_new.eval()).infer(cv.policy_input_from_msg(_request(1, 0)))[0].actions
            assert torch.equal(cv.action_chunk_from_msg(got).actions, want)  # the new weights answered
        # a restarted policy node gets the latest weights from the learner at once (TRANSIENT_LOCAL)
        with ros_process(POLICY, ready_line='weights v1'):  # it logs the weights it got on start-up
            assert wait_matched(ex, [req])
            req.publish(_request(1, 1))
            assert spin_until(ex, lambda: (1, 0, 0, 0, 1) in chunks, 20)
            assert chunks[(1, 0, 0, 0, 1)].model_version == 1
    finally:
        node.destroy_node()
