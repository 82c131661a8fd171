"""The env node is a managed lifecycle node: the transitions `ros2 lifecycle set` sends (the
lifecycle_msgs services, called here with rclpy) configure it, enable motion, hold it, and end
the run; motion (every step follows a PolicyInput) happens only while active."""
import subprocess
import sys
import time

from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

import rl_traj_ros.msg as M
from rl_traj_ros.ros.qos import DATA_QOS

from rosutil import ROOT, ros_process, spin_until, stop_process

PREFIX = '/lifecycle_test'
NODE = '/franka_env_node'


def _call(ex, client, request, timeout=60.0):
    assert client.wait_for_service(timeout_sec=20.0), client.srv_name
    fut = client.call_async(request)
    assert spin_until(ex, fut.done, timeout), f'{client.srv_name}: no answer'
    return fut.result()


def _requests_during(ex, counter, seconds):
    before = counter[0]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ex.spin_once(timeout_sec=0.05)
    return counter[0] - before


def test_motion_only_while_active_and_transitions_by_hand(rclpy_context):
    env = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.nodes.franka_env_node', '--ros-args',
                            '-p', 'autostart:=false', '-p', 'image_obs:=false', '-p', 'collect_episodes:=false',
                            '-p', 'camera_topic_rate_hz:=0.0', '-p', f'topic_prefix:={PREFIX}', '-p', 'num_steps:=0'],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    node = Node('lifecycle_driver', context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    seen = [0]
    node.create_subscription(M.PolicyInput, f'{PREFIX}/policy_input', lambda m: seen.__setitem__(0, seen[0] + 1),
                             DATA_QOS)
    get_state = node.create_client(GetState, f'{NODE}/get_state')
    change = node.create_client(ChangeState, f'{NODE}/change_state')

    def state():
        return _call(ex, get_state, GetState.Request()).current_state.id

    def transition(tid):
        return _call(ex, change, ChangeState.Request(transition=Transition(id=tid))).success
    try:
        # a policy node answers, so an active env keeps stepping
        with ros_process(['-m', 'rl_traj_ros.nodes.policy_node', '--ros-args', '-p', f'topic_prefix:={PREFIX}',
                          '-p', 'use_images:=false']):
            assert state() == State.PRIMARY_STATE_UNCONFIGURED
            assert _requests_during(ex, seen, 2.0) == 0
            assert transition(Transition.TRANSITION_CONFIGURE) and state() == State.PRIMARY_STATE_INACTIVE
            assert _requests_during(ex, seen, 2.0) == 0  # configured: the env exists, nothing moves
            assert transition(Transition.TRANSITION_ACTIVATE) and state() == State.PRIMARY_STATE_ACTIVE
            assert spin_until(ex, lambda: seen[0] >= 5, 30.0), 'no motion after activate'
            assert transition(Transition.TRANSITION_DEACTIVATE) and state() == State.PRIMARY_STATE_INACTIVE
            _requests_during(ex, seen, 1.0)  # the chunk in flight finishes
            assert _requests_during(ex, seen, 2.0) == 0  # then the robot holds
            assert transition(Transition.TRANSITION_ACTIVATE)
            n = seen[0]
            assert spin_until(ex, lambda: seen[0] >= n + 5, 30.0), 'no motion after re-activate'
            assert transition(Transition.TRANSITION_ACTIVE_SHUTDOWN)  # ends the run, releases the env
            out, _ = env.communicate(timeout=60)
            assert env.returncode == 0, out[-3000:]
            assert 'activated: motion enabled' in out and 'deactivated: holding' in out, out[-3000:]
    finally:
        stop_process(env)
        node.destroy_node()


def test_configure_fails_and_the_node_exits_when_the_robot_is_unreachable(rclpy_context, tmp_path):
    """franky with no robot at the address: configure fails (nothing was sent), exit 1, the
    address named; started as the README's by-hand lifecycle line (env_type franky implies one
    env). Beside it, autostarted: a black-holed address fails within connect_timeout_s, and a
    camera without a driver fails configure before the robot is contacted."""
    key = tmp_path / 'run.key'   # docs/nodes.md: (umask 077; openssl rand -hex 32 > run.key)
    subprocess.run(f'(umask 077; openssl rand -hex 32 > {key})', shell=True, check=True)

    def start(*params, ns='/'):
        args = [sys.executable, '-m', 'rl_traj_ros.nodes.franka_env_node', '--ros-args', '-r', f'__ns:={ns}',
                '-p', 'env_type:=franky', '-p', 'collect_episodes:=false', '-p', f'secret_file:={key}']
        for p in params:
            args += ['-p', p]
        return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    env = start('robot_ip:=127.0.0.1', 'autostart:=false', f'topic_prefix:={PREFIX}_franky',
                'run_id:=RUN')  # docs/nodes.md, as written
    t0 = time.monotonic()
    blackhole = start('robot_ip:=10.255.255.1', 'connect_timeout_s:=1.0', f'topic_prefix:={PREFIX}_bh', ns='/bh')
    camera = start('robot_ip:=127.0.0.1', 'camera_topics:=[front=/nobody/image_raw]',
                   'camera_configure_timeout_s:=1.0', f'topic_prefix:={PREFIX}_cam', ns='/cam')
    node = Node('lifecycle_driver_franky', context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    try:
        # a real robot's env node refuses the unsigned transition (another run's tooling could send it) ...
        change = node.create_client(ChangeState, f'{NODE}/change_state')
        assert not _call(ex, change, ChangeState.Request(transition=Transition(id=Transition.TRANSITION_CONFIGURE))
                         ).success
        assert env.poll() is None   # (refused: nothing was tried)
        # ... and takes its run's signed one (docs/nodes.md's line): configure fails, the node exits 1
        signed = subprocess.run([sys.executable, '-m', 'rl_traj_ros.pipelines.lifecycle', NODE, 'configure',
                                 '--run-id', 'RUN', '--secret-file', str(key)], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        assert signed.returncode == 1 and 'configure: failed' in signed.stdout, signed.stdout + signed.stderr
        out, _ = env.communicate(timeout=60)
        assert 'refused a lifecycle transition on ~/change_state' in out, out[-3000:]
        assert env.returncode == 1 and 'configure failed, nothing moved: robot_ip 127.0.0.1: cannot reach the robot ' \
                                       'on TCP 1337' in out, out[-3000:]
        assert out.strip().splitlines()[-1].endswith('exit_code=1'), out[-3000:]  # the last line agrees with the exit
        out, _ = blackhole.communicate(timeout=60)
        took = time.monotonic() - t0
        # no route, a dropped SYN, or (in this sandbox) a proxy that accepts every TCP connection: named either way
        assert blackhole.returncode == 1 and 'nothing moved: robot_ip 10.255.255.1: ' in out, out[-3000:]
        assert took < 20, f'{took:.1f} s'  # connect_timeout_s, not libfranka's ~60 s TCP timeout
        out, _ = camera.communicate(timeout=60)
        assert camera.returncode == 1, out[-3000:]
        assert ("configure failed, nothing moved: camera 'front' on /nobody/image_raw: no frame within 1 s (no "
                'publisher on /nobody/image_raw: is the camera driver running?)') in out, out[-3000:]
        assert 'robot_ip' not in out  # the cameras are checked before the robot is contacted
    finally:
        for p in (env, blackhole, camera):
            stop_process(p)
        node.destroy_node()
