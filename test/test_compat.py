"""rl_traj_ros.ros.compat: each rclpy difference between Jazzy (7.1) and Kilted (9.1) is real on
the running distro, and the helper behaves the same on both. Run on each distro by .ci/run."""
import ast
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

import pytest
import rclpy

import rl_traj_ros.srv as S
from rl_traj_ros.ros import compat

from rosutil import ROOT

MAJOR = compat.rclpy_version()[0]
DISTRO_OF_MAJOR = {7: 'jazzy', 9: 'kilted'}
SOURCES = [p for d in ('rl_traj_ros', 'scripts', 'launch', 'bench', 'tools') for p in sorted((ROOT / d).rglob('*'))
           if p.is_file() and (p.suffix == '.py' or (d == 'scripts' and p.read_bytes()[:2] == b'#!'))]


def test_the_running_rclpy_is_the_one_the_distros_lock_pins():
    distro = os.environ['ROS_DISTRO']
    lock = (ROOT / f'requirements-{distro}.lock').read_text()
    pin = next(line.split('==')[1].split()[0] for line in lock.splitlines()
               if line.startswith(('ros-rclpy==', f'ros-{distro}-rclpy==')))
    assert compat.rclpy_version() == tuple(int(x) for x in pin.split('.'))
    assert DISTRO_OF_MAJOR[MAJOR] == distro


def test_call_raises_timeout_error_where_client_call_differs(rclpy_context):
    node = rclpy.create_node('compat_caller', context=rclpy_context)
    ex = compat.make_executor(context=rclpy_context)
    ex.add_node(node)
    try:
        node.create_service(S.GetStats, 'compat_stats', lambda req, resp: (
            setattr(resp, 'names', ['x']), setattr(resp, 'values', [2.0]), resp)[-1])
        ok = node.create_client(S.GetStats, 'compat_stats')
        assert list(compat.call(ok, S.GetStats.Request(), 10.0, executor=ex).values) == [2.0]
        nobody = node.create_client(S.GetStats, 'compat_nobody')
        with pytest.raises(TimeoutError, match='compat_nobody'):
            compat.call(nobody, S.GetStats.Request(), 0.3, executor=ex)
        # the difference itself: rclpy's own blocking call on a timeout
        if MAJOR == 7:
            assert nobody.call(S.GetStats.Request(), timeout_sec=0.2) is None
        else:
            with pytest.raises(TimeoutError):
                nobody.call(S.GetStats.Request(), timeout_sec=0.2)
    finally:
        ex.shutdown()
        node.destroy_node()


def test_init_returns_the_context_and_leaves_the_signal_handlers_alone():
    before = signal.getsignal(signal.SIGINT)
    ctx = rclpy.Context()
    assert compat.init(context=ctx) is ctx and ctx.ok()
    assert signal.getsignal(signal.SIGINT) is before
    ctx.try_shutdown()
    raw = rclpy.Context()
    got = rclpy.init(context=raw)
    try:  # the difference: Kilted returns a context manager, Jazzy None
        assert (got is None) if MAJOR == 7 else hasattr(got, '__enter__')
    finally:
        raw.try_shutdown()


def test_the_events_executor_is_there_on_both_distros_and_runs_callbacks(rclpy_context):
    assert compat.has_events_executor()  # Jazzy from 7.1.4, Kilted
    ex = compat.make_executor(context=rclpy_context)
    assert type(ex).__name__ == 'EventsExecutor'
    node = rclpy.create_node('compat_timer', context=rclpy_context)
    ticks = []
    node.create_timer(0.01, lambda: ticks.append(1))
    ex.add_node(node)
    deadline = time.monotonic() + 10
    while len(ticks) < 3 and time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.05)
    ex.shutdown()
    node.destroy_node()
    assert len(ticks) >= 3


def test_no_api_deprecated_in_either_distro_is_used():
    """``logger.warn`` (deprecated in 9.1), ``rclpy.qos_event`` and a name-only ``declare_parameter``
    (deprecated in both) stay out; what each warns is checked on the running rclpy."""
    found = []
    for path in SOURCES:
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                if n.func.attr == 'warn' and 'get_logger' in ast.unparse(n.func.value):
                    found.append(f'{path.name}:{n.lineno} logger.warn')
                if n.func.attr == 'declare_parameter' and len(n.args) + len(n.keywords) < 2:
                    found.append(f'{path.name}:{n.lineno} name-only declare_parameter')
            if isinstance(n, (ast.Import, ast.ImportFrom)) and 'qos_event' in ast.unparse(n):
                found.append(f'{path.name}:{n.lineno} rclpy.qos_event')
    assert found == []
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node('compat_deprecations', context=ctx)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            node.get_logger().warn('compat test: the deprecated name')
        assert any('warning' in str(x.message) for x in w) == (MAJOR >= 9)
    finally:
        node.destroy_node()
        ctx.try_shutdown()


def test_the_package_keeps_to_python_3_10_syntax_for_humble():
    """Humble's Python is 3.10 (Ubuntu 22.04): every module and script compiles with a real 3.10
    where pyenv has one, else with ast's 3.10 grammar."""
    py310 = sorted(Path(os.popen('pyenv root 2>/dev/null').read().strip() or '/nonexistent')
                   .glob('versions/3.10.*/bin/python'))
    if py310:
        r = subprocess.run([str(py310[-1]), '-c', 'import sys\nfor p in sys.argv[1:]: compile(open(p).read(), p, "exec")',
                            *map(str, SOURCES)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
    for path in SOURCES:
        ast.parse(path.read_text(), str(path), feature_version=(3, 10))
    assert len(SOURCES) > 100
