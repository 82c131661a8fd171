"""Smoke pipeline: every message type, realistic payloads, through an echo process and back."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor

from ..params.defaults import ENV
from .. import msg as M
from ..collect.collector import TrajectoryCollector, TrajectoryPlan
from ..data.schema import ActionChunk, PolicyInput
from ..data.synthetic import SyntheticSpec, make_parts
from ..data.tree import tree_equal
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS


def _messages(envs: int, hw: int):
    spec = SyntheticSpec(num_epochs=1, chunks_per_epoch=2, sources=((0, 0),), envs_per_source=envs, chunk=8,
                         image_hw=(hw, hw))
    parts = list(make_parts(spec))
    plan = TrajectoryPlan(num_epochs=1, chunks_per_epoch=2, sources=[(0, 0)], envs_per_source=envs)
    col = TrajectoryCollector(plan)
    traj = [o for p, e in parts for o in col.push(p) + col.push(e)][0].trajectory
    pol, env = parts[-1]
    decoded = {'PolicyPart': pol, 'EnvPart': env, 'PolicyInput': PolicyInput(pol.sources, pol.obs, env),
               'ActionChunk': ActionChunk(pol.sources, pol.actions, 1), 'Trajectory': traj}
    msgs = {'PolicyPart': cv.policy_part_to_msg(pol, 1), 'EnvPart': cv.env_part_to_msg(env),
            'PolicyInput': cv.policy_input_to_msg(decoded['PolicyInput']),
            'ActionChunk': cv.action_chunk_to_msg(decoded['ActionChunk']),
            'Trajectory': cv.trajectory_to_msg(traj),
            'Intervention': M.Intervention(source_device='smoke', env_index=-1, action=[0.0] * 7, active=True)}
    return msgs, decoded


def _same(name, got, want) -> bool:
    if name == 'PolicyPart':
        p = cv.policy_part_from_msg(got)
        return tree_equal(p.obs, want.obs) and tree_equal(p.output.forward_inputs, want.output.forward_inputs)
    if name == 'EnvPart':
        return tree_equal(cv.env_part_from_msg(got).transition.rewards, want.transition.rewards)
    if name == 'PolicyInput':
        return tree_equal(cv.policy_input_from_msg(got).obs, want.obs)
    if name == 'ActionChunk':
        return tree_equal(cv.action_chunk_from_msg(got).actions, want.actions)
    if name == 'Trajectory':
        return tree_equal(cv.trajectory_from_msg(got).to_dict(), want.to_dict())
    return got.source_device == 'smoke'


def run_smoke(envs: int = 8, image_size: int = ENV.image_size, timeout: float = 60.0) -> int:
    echo = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.nodes.echo_node'], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    rclpy.init()
    node = rclpy.create_node('rl_traj_ros_smoke')
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    ok = False
    try:
        assert echo.stdout.readline().strip() == 'ready', 'echo process failed to start'
        msgs, decoded = _messages(envs, image_size)
        got: dict = {}
        pubs = {}
        for name, m in msgs.items():
            pubs[name] = node.create_publisher(type(m), f'echo_in/{name}', DATA_QOS)
            node.create_subscription(type(m), f'echo_out/{name}', lambda x, n=name: got.__setitem__(n, x), DATA_QOS)
        deadline = time.monotonic() + timeout
        while any(p.get_subscription_count() == 0 for p in pubs.values()) and time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.05)
        t0 = time.monotonic()
        for name, m in msgs.items():
            if hasattr(m, 'header'):
                m.header.stamp = node.get_clock().now().to_msg()
            pubs[name].publish(m)
        while len(got) < len(msgs) and time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.05)
        dt = time.monotonic() - t0
        for name in msgs:
            status = 'missing' if name not in got else ('ok' if _same(name, got[name], decoded.get(name)) else 'MISMATCH')
            print(f'[smoke] {name:<13} {status}')
        ok = len(got) == len(msgs) and all(_same(n, got[n], decoded.get(n)) for n in msgs)
        print(f'[smoke] {len(got)}/{len(msgs)} message types round-tripped through DDS in {dt * 1000:.0f} ms '
              f'({envs} envs, {image_size}x{image_size} cameras): {"PASS" if ok else "FAIL"}')
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        os.killpg(echo.pid, signal.SIGINT)
        echo.wait(10)
    return 0 if ok else 1
