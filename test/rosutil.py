"""Helpers to run real ROS 2 processes from tests and always stop them."""
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def ros_process(args, ready_line='ready', timeout=30.0, env=None, distro=None):
    """Start a python process in this DDS domain (in another distro's set-up with ``distro``:
    ``distro_command``); wait for its ready line; SIGINT it after."""
    cmd, base = distro_command(distro, args) if distro else ([sys.executable, *args], os.environ)
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env={**base, **(env or {})}, start_new_session=True)
    lines = []
    try:
        deadline = time.monotonic() + timeout
        while ready_line:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f'process {args} exited before ready:\n' + ''.join(lines))
            lines.append(line)
            if ready_line in line:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f'process {args} not ready:\n' + ''.join(lines))
        yield p
    finally:
        stop_process(p)


OTHER_DISTRO = {'jazzy': 'kilted', 'kilted': 'jazzy'}
# what env.sh / a venv put into the environment: taken out before another distro's env.sh
_DISTRO_VARS = ('PYTHONPATH', 'LD_LIBRARY_PATH', 'AMENT_PREFIX_PATH', 'CMAKE_PREFIX_PATH', 'VIRTUAL_ENV',
                'ROS_DISTRO', 'RL_TRAJ_ROS_DISTRO', 'RL_TRAJ_ROS_VENV', 'COLCON_PREFIX_PATH')


def distro_command(distro, args):
    """``python args`` run in ``distro``'s set-up (its venv and message build, env.sh), as a
    (command, env) pair for Popen, or None where that distro is not set up in this checkout
    (``RL_TRAJ_ROS_DISTRO=<distro> bash tools/setup.sh``; .ci/run sets up both)."""
    if not (ROOT / f'.venv-{distro}').exists() or not (ROOT / '.colcon' / distro / 'install').is_dir():
        return None
    env = {k: v for k, v in os.environ.items() if k not in _DISTRO_VARS}
    venv = os.environ.get('VIRTUAL_ENV', '')
    env['PATH'] = ':'.join(d for d in env.get('PATH', '').split(':') if not (venv and d.startswith(venv)))
    env['RL_TRAJ_ROS_DISTRO'] = distro
    script = f'. {ROOT}/env.sh && exec python "$@"'
    return ['bash', '-c', script, 'python', *map(str, args)], env


def stop_process(p, grace=10.0):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGINT)
            p.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        except ProcessLookupError:
            pass


def free_udp_port(kind: str = 'udp') -> int:
    """A port nothing on this machine holds now (the kernel's pick), for a SpaceMouse stand-in (or,
    ``kind='tcp'``, a rendezvous): ports derived from the pid collide between tests and runs."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM if kind == 'udp' else socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def spin_until(executor, predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        executor.spin_once(timeout_sec=0.05)
    return True


def wait_matched(executor, endpoints, timeout=20.0):
    """Wait until every publisher has a subscriber (and subscription a publisher)."""
    def matched():
        return all((e.get_subscription_count() if hasattr(e, 'get_subscription_count') else e.get_publisher_count())
                   >= 1 for e in endpoints)
    return spin_until(executor, matched, timeout)


def tcp_listener_inode(host: str, port: int):
    """The socket inode listening on host:port (IPv4), from /proc/net/tcp; None if nothing listens."""
    want = ''.join(f'{int(b):02X}' for b in reversed(host.split('.'))) + f':{port:04X}'
    with open('/proc/net/tcp') as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if cols[1] == want and cols[3] == '0A':  # 0A: LISTEN
                return int(cols[9])
    return None


def owns_socket(pid: int, inode: int) -> bool:
    """Whether process ``pid`` holds the socket ``inode`` (it is the one listening there)."""
    fd_dir = f'/proc/{pid}/fd'
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(f'{fd_dir}/{fd}') == f'socket:[{inode}]':
                return True
        except OSError:
            continue
    return False


@contextmanager
def scripted_cell(port: int, target, cameras, run_id=None, label_at_target=False):
    """A robot cell's operator and cameras as stand-ins: the scripted SpaceMouse operator sending
    raw HID reports to UDP ``port`` that drive the TCP to ``target`` (x, y, z) (watching the robot
    of ``run_id`` only, when given), and one 320x240 camera stand-in per ``(topic, extra
    arguments)`` of ``cameras``; ``label_at_target``: the operator labels each episode a success with
    the SpaceMouse's button chord once the TCP held the target."""
    from contextlib import ExitStack
    with ExitStack() as stack:
        stack.enter_context(ros_process(['test/spacemouse_operator.py', str(port), *(str(x) for x in target),
                                         *([run_id] if run_id else []),
                                         *(['--label-at-target'] if label_at_target else [])]))
        for topic, extra in cameras:
            stack.enter_context(ros_process(['test/camera_standin.py', '--width', '320', '--height', '240',
                                             '--topic', topic, *extra], ready_line='[camera_standin]'))
        yield
