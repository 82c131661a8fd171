"""Nodes stop promptly and cleanly on SIGINT, also when started in the background of a script
(where SIGINT arrives ignored) and while they wait for a peer that never comes."""
import os
import signal
import subprocess
import sys
import time

import pytest

from rosutil import ROOT


@pytest.mark.parametrize('inherited', ['default', 'ignored'])
def test_env_node_without_a_policy_node_stops_on_sigint(inherited):
    def preexec():
        os.setsid()
        if inherited == 'ignored':  # what `node &` in a non-interactive script does
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    p = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.nodes.franka_env_node', '--ros-args',
                          '-p', 'image_obs:=false', '-p', 'collect_episodes:=false', '-p', 'camera_topic_rate_hz:=0.0',
                          '-p', 'topic_prefix:=/signals_test'],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=preexec,
                         env={**os.environ, 'MUJOCO_GL': 'egl'})
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if '] ready' in line:
                break
        time.sleep(3)  # the rollout thread is up and waits for a policy node that never comes
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGINT)
        out, _ = p.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    log = ''.join(lines) + out
    print(f'\nSIGINT ({inherited}) -> exit {p.returncode} after {took:.1f} s')
    assert p.returncode == 0, log[-3000:]
    assert took < 15, log[-3000:]
    assert 'Traceback' not in log and 'InvalidHandle' not in log and 'EGL_NOT_INITIALIZED' not in log, log[-3000:]


def test_env_node_that_requires_teleop_never_moves_without_a_device():
    """teleop:=gello without a Dynamixel: the teleop node dies, nobody publishes Interventions;
    the env node must not reset (move home) or step, and must fail with the reason."""
    p = subprocess.run([sys.executable, '-m', 'rl_traj_ros.nodes.franka_env_node', '--ros-args',
                        '-p', 'image_obs:=false', '-p', 'collect_episodes:=false', '-p', 'camera_topic_rate_hz:=0.0',
                        '-p', 'teleop_only:=true', '-p', 'require_teleop:=true', '-p', 'teleop_timeout_s:=2.0',
                        '-p', 'topic_prefix:=/teleop_gate_test'],
                       cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, 'MUJOCO_GL': 'egl'})
    log = p.stdout + p.stderr
    assert p.returncode == 1, log[-3000:]
    assert 'no teleop device on /teleop_gate_test/intervention within 2.0 s' in log
    assert 'chunks=0 episodes=0' in log  # not a single chunk executed


def test_parameters_are_read_only_and_ranged(rclpy_context):
    """`ros2 param set` is refused (nodes read parameters once), and a value outside a shared
    range stops the node at start-up naming the parameter."""
    import rclpy
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    from rosutil import ros_process
    bad = subprocess.run([sys.executable, '-m', 'rl_traj_ros.nodes.trajectory_collector_node', '--ros-args',
                          '-p', 'num_envs:=0', '-p', 'topic_prefix:=/param_test'], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and 'num_envs' in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    for node, param in (('spacemouse_teleop_node', 'rate_hz:=0.0'), ('learner_node', 'clip_ratio:=2.0')):
        bad = subprocess.run([sys.executable, '-m', f'rl_traj_ros.nodes.{node}', '--ros-args', '-p', param, '-p',
                              'topic_prefix:=/param_test'], cwd=ROOT, capture_output=True, text=True, timeout=60)
        name = param.split(':=')[0]  # node-specific ranges too: refused at start-up, named
        assert bad.returncode != 0 and name in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    with ros_process(['-m', 'rl_traj_ros.nodes.trajectory_collector_node', '--ros-args', '-r',
                      '__node:=param_test_collector', '-p', 'topic_prefix:=/param_test']):
        node = rclpy.create_node('param_setter', context=rclpy_context)
        try:
            cli = node.create_client(SetParameters, '/param_test_collector/set_parameters')
            assert cli.wait_for_service(timeout_sec=20)
            req = SetParameters.Request(parameters=[Parameter(name='num_envs', value=ParameterValue(
                type=ParameterType.PARAMETER_INTEGER, integer_value=4))])
            from rclpy.executors import SingleThreadedExecutor
            ex = SingleThreadedExecutor(context=rclpy_context)
            ex.add_node(node)
            fut = cli.call_async(req)
            ex.spin_until_future_complete(fut, timeout_sec=20)
            (result,) = fut.result().results
            assert not result.successful and 'read-only' in result.reason
        finally:
            node.destroy_node()
