"""Every message type through real DDS between two processes, with realistic payloads:
8 envs, two 128x128x3 uint8 cameras, states, a chunk of 7-dof actions; and between the two
supported distros (a Jazzy process and a Kilted one on one domain)."""
import os
import subprocess

import pytest
import torch
import rclpy
from rclpy.executors import SingleThreadedExecutor

from rl_traj_ros import msg as M
from rl_traj_ros.collect.collector import TrajectoryCollector, TrajectoryPlan
from rl_traj_ros.data.schema import ActionChunk, PolicyInput
from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
from rl_traj_ros.data.tree import tree_equal
from rl_traj_ros.ros import compat, conversion as cv
from rl_traj_ros.ros.qos import DATA_QOS

from rosutil import OTHER_DISTRO, distro_command, ros_process, spin_until, wait_matched


def test_every_message_type_round_trips_between_processes(rclpy_context):
    _round_trip(rclpy_context)


def test_a_jazzy_node_and_a_kilted_node_exchange_every_message_type(rclpy_context):
    """This distro's process and the echo node of the other distro's set-up (its rclpy, Fast DDS
    and message build) on one domain: PolicyPart, EnvPart and the rest decode to the same tensors."""
    other = OTHER_DISTRO[os.environ['ROS_DISTRO']]
    if distro_command(other, []) is None:
        msg = f'ROS 2 {other} is not set up here: RL_TRAJ_ROS_DISTRO={other} bash tools/setup.sh (.ci/run does)'
        if os.environ.get('CI'):
            pytest.fail(msg)
        pytest.skip(msg)
    cmd, env = distro_command(other, ['-c', 'from rl_traj_ros.ros import compat; print(compat.rclpy_version()[0])'])
    theirs = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert int(theirs.stdout.split()[-1]) != compat.rclpy_version()[0], theirs.stderr  # really the other rclpy
    _round_trip(rclpy_context, distro=other)


def _round_trip(rclpy_context, distro=None):
    spec = SyntheticSpec(num_epochs=1, chunks_per_epoch=2, sources=((0, 0),), envs_per_source=8, chunk=8,
                         image_hw=(128, 128), num_extra_views=1, with_reward_model=True)
    parts = list(make_parts(spec))
    pol, env = parts[-1]
    plan = TrajectoryPlan(num_epochs=1, chunks_per_epoch=2, sources=[(0, 0)], envs_per_source=8)
    plan.collect.collect_transitions = True
    col = TrajectoryCollector(plan)
    traj = [o for p, e in parts for o in col.push(p) + col.push(e)][0].trajectory
    interv = M.Intervention(source_device='spacemouse', env_index=-1, action=[0.1, -0.2, 0.3, 0, 0, 0, 1.0],
                            active=True, buttons=1)
    sent = {
        'PolicyPart': cv.policy_part_to_msg(pol, model_version=3),
        'EnvPart': cv.env_part_to_msg(env),
        'PolicyInput': cv.policy_input_to_msg(PolicyInput(pol.sources, pol.obs, env)),
        'ActionChunk': cv.action_chunk_to_msg(ActionChunk(pol.sources, pol.actions, 3)),
        'Trajectory': cv.trajectory_to_msg(traj),
        'Intervention': interv,
    }
    assert sum(len(t.data) for t in sent['PolicyPart'].obs.tensors) >= 8 * 128 * 128 * 3 * 2
    with ros_process(['-m', 'rl_traj_ros.nodes.echo_node'], distro=distro, timeout=60.0):
        node = rclpy.create_node('roundtrip_test', context=rclpy_context)
        ex = SingleThreadedExecutor(context=rclpy_context)
        ex.add_node(node)
        got = {}
        pubs = []
        for name, m in sent.items():
            pubs.append(node.create_publisher(type(m), f'echo_in/{name}', DATA_QOS))
            node.create_subscription(type(m), f'echo_out/{name}', lambda x, n=name: got.__setitem__(n, x), DATA_QOS)
        assert wait_matched(ex, pubs), 'echo process never matched'
        for pub, (name, m) in zip(pubs, sent.items()):
            if hasattr(m, 'header'):
                m.header.stamp = node.get_clock().now().to_msg()
                m.header.frame_id = name
            pub.publish(m)
        assert spin_until(ex, lambda: len(got) == len(sent), 60), f'only got {sorted(got)}'
        ex.shutdown()
        node.destroy_node()

    p2 = cv.policy_part_from_msg(got['PolicyPart'])
    assert tree_equal(p2.obs, pol.obs) and p2.obs['main_images'].shape == (8, 128, 128, 3)
    assert tree_equal(p2.output.forward_inputs, pol.output.forward_inputs)
    assert got['PolicyPart'].model_version == 3 and got['PolicyPart'].header.frame_id == 'PolicyPart'
    e2 = cv.env_part_from_msg(got['EnvPart'])
    assert torch.equal(e2.transition.intervene_actions, env.transition.intervene_actions)
    assert torch.equal(e2.final_prev_values, env.final_prev_values)
    i2 = cv.policy_input_from_msg(got['PolicyInput'])
    assert tree_equal(i2.obs, pol.obs) and torch.equal(i2.env_part.transition.rewards, env.transition.rewards)
    assert torch.equal(cv.action_chunk_from_msg(got['ActionChunk']).actions, pol.actions)
    t2 = cv.trajectory_from_msg(got['Trajectory'])
    assert tree_equal(t2.to_dict(), traj.to_dict()) and t2.keys == traj.keys
    assert list(got['Intervention'].action) == pytest.approx([0.1, -0.2, 0.3, 0, 0, 0, 1.0])
    assert got['Intervention'].source_device == 'spacemouse' and got['Intervention'].buttons == 1
