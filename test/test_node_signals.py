"""Nodes stop promptly and cleanly on SIGINT, twice in a row, also when started in the background
of a script (where SIGINT arrives ignored), while importing, and while they wait for a peer that
never comes."""
import os
import signal
import subprocess
import sys
import time

from rosutil import ROOT, free_udp_port


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


def _node_kinds(tmp_path, prefix):
    common = ['-p', f'topic_prefix:={prefix}']
    return {
        'franka_env_node': ['-p', 'image_obs:=false', '-p', 'collect_episodes:=false', '-p', 'camera_topic_rate_hz:=0.0'],
        'policy_node': [],
        'trajectory_collector_node': [],
        'replay_buffer_writer_node': ['-p', f'output_dir:={tmp_path / "buffer"}'],
        'learner_node': ['-p', f'metrics_dir:={tmp_path / "learner"}'],
        'spacemouse_teleop_node': ['-p', f'hid_udp_port:={free_udp_port()}'],
    }, common


def _wait_ready(procs):
    for node, p in procs.items():
        line, lines = '', []
        while '] ready' not in line:
            line = p.stdout.readline()
            assert line, f'{node} exited before ready:\n' + ''.join(lines)
            lines.append(line)


def test_two_sigints_10ms_apart_never_abort_a_node(tmp_path):
    """A terminal Ctrl-C on `ros2 launch` signals every node, and launch signals it again: each
    node kind gets two SIGINTs 10 ms apart once it is up (exit 0, flushed, no traceback), and a
    second set gets them while still importing (exit 0, quietly)."""
    kinds, common = _node_kinds(tmp_path, '/two_signals')

    def start(node, extra, inherited='default'):
        def preexec():
            os.setsid()
            if inherited == 'ignored':  # what `node &` in a non-interactive script does
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        return subprocess.Popen([sys.executable, '-m', f'rl_traj_ros.nodes.{node}', '--ros-args', *common, *extra],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=preexec, env={**os.environ, 'MUJOCO_GL': 'egl'})

    def twice(p):
        os.kill(p.pid, signal.SIGINT)
        time.sleep(0.01)
        os.kill(p.pid, signal.SIGINT)

    procs = {}
    try:
        for node, extra in kinds.items():  # up: spinning (the env node waits for a policy node)
            procs[node] = start(node, extra)
        _wait_ready(procs)
        time.sleep(1.0)  # the env node's rollout thread waits for a policy node that never comes
        t0 = time.monotonic()
        for p in procs.values():
            twice(p)
        early = {f'{node} (importing, SIGINT inherited as ignored)': start(node, extra, 'ignored')
                 for node, extra in kinds.items()}
        for p in early.values():  # the handler is in (stop_signals), torch and rclpy are being imported
            _wait_catching_sigint(p)
            twice(p)
        for node, p in {**procs, **early}.items():
            out, _ = p.communicate(timeout=60)
            assert p.returncode == 0, f'{node}: exit {p.returncode}\n{out[-3000:]}'
            for bad in ('Traceback', 'terminate called', 'InvalidHandle', 'EGL_NOT_INITIALIZED'):
                assert bad not in out, f'{node}:\n{out[-3000:]}'
        took = time.monotonic() - t0
        print(f'\n{len(procs) + len(early)} nodes, two SIGINTs each, all exited 0 within {took:.1f} s')
        assert took < 30
    finally:
        for p in [*procs.values(), *locals().get('early', {}).values()]:
            if p.poll() is None:
                p.kill()
                p.wait()


def _wait_catching_sigint(p, timeout=60.0):
    """Until the process catches SIGINT (/proc SigCgt): a signal sent before its first module line
    installed the handler is dropped by the kernel (inherited as ignored); a fixed sleep missed
    that moment under load."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        try:
            with open(f'/proc/{p.pid}/status') as f:
                caught = int(next(line.split()[1] for line in f if line.startswith('SigCgt:')), 16)
        except (FileNotFoundError, ProcessLookupError):  # it exited between poll() and the read: poll() says so next
            continue
        if caught & (1 << (signal.SIGINT - 1)):
            return
        time.sleep(0.005)
    raise AssertionError(f'pid {p.pid} never caught SIGINT within {timeout} s')


def test_forked_nodes_start_and_stop_like_executed_ones(tmp_path):
    """``run``'s nodes are forks of a server that imported them (``pipelines.node_forks``): every
    node kind comes up, takes two SIGINTs 10 ms apart and exits 0 with nothing bad in its
    output; a refused parameter ends the node non-zero, naming it, as the executed node does."""
    from rl_traj_ros.pipelines import node_forks
    kinds, common = _node_kinds(tmp_path, '/forked')
    env = {**os.environ, 'MUJOCO_GL': 'egl', 'PYTHONUNBUFFERED': '1'}

    def fork(node, extra):
        return node_forks.spawn([sys.executable, '-m', f'rl_traj_ros.nodes.{node}', '--ros-args', *common, *extra],
                                env, cwd=str(ROOT))
    procs = {node: fork(node, extra) for node, extra in kinds.items()}
    try:
        _wait_ready(procs)
        assert len({p.pid for p in procs.values()}) == len(procs)
        assert open(f'/proc/{procs["policy_node"].pid}/comm').read().strip() == 'policy_node'
        time.sleep(1.0)
        for p in procs.values():
            os.kill(p.pid, signal.SIGINT)
            time.sleep(0.01)
            os.kill(p.pid, signal.SIGINT)
        for node, p in procs.items():
            assert p.wait(60) == 0, f'{node}: exit {p.returncode}\n{p.stdout.read()[-3000:]}'
            out = p.stdout.read()
            assert 'SIGINT: stopping' in out, f'{node}:\n{out[-3000:]}'
            for bad in ('Traceback', 'terminate called', 'InvalidHandle', 'EGL_NOT_INITIALIZED'):
                assert bad not in out, f'{node}:\n{out[-3000:]}'
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    bad = fork('trajectory_collector_node', ['-p', 'num_envs:=0'])
    assert bad.wait(60) != 0
    out = bad.stdout.read()
    assert 'num_envs' in out, out
