"""``RosRun``: the package's nodes as separate processes with one params file, without `launch`.

What ``run sim_collect``/``sim_train``/``real_collect`` start: each node in its own process
group (a fork of the node fork server, ``node_forks``, which has imported the nodes already; a
command that is not one of this package's nodes, or ``fork_nodes=False``, is executed), its
output streamed and kept under ``<workdir>/node_logs/``, progress and totals read from the
nodes' /diagnostics (not from printed lines), and an orderly end: wait for the env nodes, drain
(everything the collector flushed is stored), then SIGINT every node (each flushes) and SIGKILL
only what did not exit within 30 s. Should the runner itself die (SIGKILL, a crash), the kernel
sends each node SIGINT (``PR_SET_PDEATHSIG``, directly or through the fork server's death): no
node outlives the run that started it, driving a robot or publishing into the next run's topics
(processes are started from one long-lived thread: the signal follows the starting thread, not
the process). ``command`` is the one place a node's command line is made: a subclass can run a
node another way (under a network namespace, or a test's variant of a node).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Optional

from . import node_forks

NODE_OF = {'writer': 'replay_buffer_writer_node', 'collector': 'trajectory_collector_node', 'policy': 'policy_node'}


def installed_executable(package: str, executable: str) -> str:
    """What ``ros2 run PACKAGE EXECUTABLE`` runs (``<prefix>/lib/<package>/<executable>``)."""
    from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    try:
        prefix = get_package_prefix(package)
    except PackageNotFoundError:
        raise FileNotFoundError(f'ROS package {package!r} is not installed (or its workspace is not sourced); '
                                f'e.g. apt install ros-$ROS_DISTRO-{package.replace("_", "-")}') from None
    path = Path(prefix) / 'lib' / package / executable
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f'ROS package {package!r} has no executable {executable!r} ({path})')
    return str(path)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:  # exited meanwhile (a forked node's code is read by its server)
        pass


def run_identity(sections) -> tuple[str, str, bool]:
    """(run id, secret file, whether the secret was made here), written into every node parameter
    dict of ``sections``: one run id for all the run's nodes (the collector's when set, else a new
    one) and a secret (``run_guard``; a fresh one unless given), so that a second run in the same
    ROS domain neither feeds nor moves this one."""
    from ..data.identity import new_run_id
    from ..delivery.run_guard import new_secret_file
    sections = list(sections)
    run_id = next((p['run_id'] for p in sections if p.get('run_id')), '') or new_run_id()
    given = next((p['secret_file'] for p in sections if p.get('secret_file')), '')
    secret = given or new_secret_file(run_id)
    for p in sections:
        p['run_id'], p['secret_file'] = run_id, secret
    return run_id, secret, not given


def adopt_identity(params: dict, run_id: Optional[str], secret_file: Optional[str]) -> dict:
    """``params`` (node kind -> parameters) with a given run id and secret file in every node's (the
    CLI's --run-id and --secret-file): a node started beside the run joins it with the same two."""
    for p in params.values():
        p.update({k: v for k, v in (('run_id', run_id), ('secret_file', secret_file)) if v})
    return params


def dump_params(doc: dict) -> str:
    """A params file's text: rcl's parser refuses YAML aliases, which PyYAML writes for a value two
    nodes share."""
    import yaml

    class NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data) -> bool:
            return True
    return yaml.dump(doc, Dumper=NoAliases, sort_keys=False)


def with_run_identity(params_yaml: str) -> tuple[str, str, bool, str]:
    """``run_identity`` of a params file, also in a '/**' section for the nodes it has no section of."""
    import yaml
    doc = yaml.safe_load(params_yaml) or {}
    doc.setdefault('/**', {})
    run_id, secret, made = run_identity(v.setdefault('ros__parameters', {}) for v in doc.values())
    return run_id, secret, made, dump_params(doc)


INTERRUPT_DRAIN_S = 10.0  # after a Ctrl-C: the most the run waits for the env nodes' last parts to be stored


class RosRun:
    def __init__(self, params_yaml: str, workdir: str, quiet: bool = False, extra_env: Optional[dict] = None,
                 fork_nodes: bool = True):
        self.work = Path(workdir)
        self.work.mkdir(parents=True, exist_ok=True)
        self.params_file = self.work / 'params.yaml'
        self.run_id, self.secret_file, self.own_secret, params_yaml = with_run_identity(params_yaml)
        self.params_file.write_text(params_yaml)
        self.quiet = quiet
        self.env = {**os.environ, 'PYTHONUNBUFFERED': '1', **(extra_env or {})}
        self.fork_nodes = fork_nodes
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, list[str]] = {}
        self.specs: dict[str, tuple[str, list[str]]] = {}
        self.status: dict[str, dict[str, float]] = {}  # node's fully qualified name -> its latest counters
        self.t0 = time.monotonic()
        self.node = None
        self.signals = None  # the runner's own SIGINT/SIGTERM, once the pipeline started
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix='ros-run-spawner')

    # -- processes ---------------------------------------------------------------------------
    def command(self, name: str, module: str, extra: list[str]) -> list[str]:
        """``module``: one of this package's nodes, or ``PKG/EXECUTABLE`` of another installed ROS
        package (a camera driver), which gets its own ROS arguments only."""
        if '/' in module:
            return [installed_executable(*module.split('/', 1)), '--ros-args', *extra]
        return [sys.executable, '-m', f'rl_traj_ros.nodes.{module}', '--ros-args', '--params-file',
                str(self.params_file), *extra]

    def start(self, name: str, module: str, extra: list[str] = ()) -> None:
        """Start (or start again, after it exited) node ``name``."""
        extra = list(extra)
        self.specs[name] = (module, extra)
        cmd = self.command(name, module, extra)
        if self.fork_nodes and node_forks.node_module(cmd):
            proc = self.procs[name] = node_forks.spawn(cmd, self.env)
        else:
            # forked from one long-lived thread: PR_SET_PDEATHSIG fires when the forking *thread* ends, and a
            # restart may come from a thread that ends right after (a watchdog, a test's chaos thread)
            proc = self.procs[name] = self._spawner.submit(
                subprocess.Popen, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
                preexec_fn=partial(node_forks.die_with_parent, os.getpid()), **self.process_group()).result()
        sink = self.logs[name] = []
        (self.work / 'node_logs').mkdir(exist_ok=True)
        log_file = open(self.work / 'node_logs' / f'{name}.log', 'a', buffering=1)  # kept with the run's outputs

        def pump(prefix=f'[{name}]'):
            with log_file:
                for line in proc.stdout:
                    sink.append(line)
                    log_file.write(line)
                    if not self.quiet:
                        print(prefix, line, end='', flush=True)
        threading.Thread(target=pump, daemon=True).start()

    def process_group(self) -> dict:
        """Popen's arguments for an executed node's process group: a session of its own (a Ctrl-C in
        the runner's terminal reaches the runner alone, which then stops the nodes in order)."""
        return {'start_new_session': True}

    def restart(self, name: str) -> None:
        self.start(name, *self.specs[name])

    def start_pipeline(self, num_env_nodes: int, extra_nodes: Optional[dict] = None) -> None:
        """Writer, collector, policy, the extra nodes (teleop, learners), then the env nodes.

        A Ctrl-C (SIGINT or SIGTERM, once or more) of the runner only sets a flag: the wait ends,
        every node is stopped as at a normal end (each flushes) and the run returns its figures
        with ``interrupted``, instead of rclpy's handler tearing the runner's context down mid-spin."""
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray

        from ..ros import compat
        from ..nodes.stop_signals import StopSignals
        if threading.current_thread() is threading.main_thread():
            self.signals = StopSignals().install()
        compat.init()
        self.node = rclpy.create_node('sim_collect_runner')
        from ..nodes.common import run_hardware_id
        mine = run_hardware_id(self.run_id)  # another run's nodes have the same names
        self.node.create_subscription(DiagnosticArray, '/diagnostics', lambda m: self.status.update(
            {s.name: {kv.key: float(kv.value) for kv in s.values} for s in m.status if s.hardware_id == mine}), 100)
        for name, module in NODE_OF.items():
            self.start(name, module)
        for name, (module, extra) in (extra_nodes or {}).items():
            self.start(name, module, extra)
        for r in range(num_env_nodes):
            self.start(f'env_{r}', 'franka_env_node', ['-r', f'__ns:=/env_{r}', '-p', f'env_rank:={r}'])

    @property
    def interrupted(self) -> str:
        """The signal that stopped the run ('' when none did)."""
        return self.signals.name() if self.signals is not None else ''

    @property
    def env_names(self) -> list[str]:
        return [n for n in self.procs if n.startswith('env_')]

    def stat(self, name: str, key: str, default: float = float('-inf')) -> float:
        fqn = f'/{name}/franka_env_node' if name.startswith('env_') else f'/{NODE_OF.get(name, name)}'
        return self.status.get(fqn, {}).get(key, default)

    def spin(self, seconds: float = 0.1) -> None:
        import rclpy
        rclpy.spin_once(self.node, timeout_sec=seconds)

    # -- the end -----------------------------------------------------------------------------
    def wait_env_nodes(self, stop_when_a_node_dies: bool = True) -> None:
        """Until every env node exited (or, with ``stop_when_a_node_dies``, another node failed:
        nothing more would be stored), then each env node's last status."""
        envs = self.env_names
        while any(self.procs[n].poll() is None for n in envs) and not self.interrupted:
            self.spin()
            if stop_when_a_node_dies and any(p.poll() not in (None, 0) for n, p in self.procs.items()
                                             if n not in envs):
                break
        deadline = time.monotonic() + 5.0  # sent and acknowledged before each env node exited
        while time.monotonic() < deadline and not self.interrupted and not all(self.stat(n, 'finished', 0)
                                                                                for n in envs):
            self.spin()

    def drain(self, timeout_s: float) -> tuple[dict, dict]:
        """Until everything the collector flushed is stored (at once when a node failed). After a
        Ctrl-C the env nodes stop first (each sends the EnvPart of the chunk it executed last), then
        what they sent is drained for at most ``INTERRUPT_DRAIN_S``: upstream first, so the policy,
        collector and writer are still up to pass it on and store it."""
        from .drain import wait_stored
        if self.interrupted and not self.failed():
            self.stop_env_nodes()
            timeout_s = min(timeout_s, INTERRUPT_DRAIN_S)
        _, col, wr = wait_stored(self.node, timeout_s if not self.failed() else 0.0, run_id=self.run_id)
        return col, wr

    def stop_env_nodes(self, timeout_s: float = 30.0) -> None:
        envs = [self.procs[n] for n in self.env_names if self.procs[n].poll() is None]
        for p in envs:
            _signal_group(p.pid, signal.SIGINT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(p.poll() is None for p in envs):
            self.spin(0.05)

    def stop(self) -> None:
        import rclpy
        for p in self.procs.values():
            if p.poll() is None:
                _signal_group(p.pid, signal.SIGINT)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                _signal_group(p.pid, signal.SIGKILL)
                p.wait()
        if self.node is not None:
            self.node.destroy_node()
        rclpy.try_shutdown()
        if self.signals is not None:
            self.signals.uninstall()

    def result(self, failed: list[str], col: dict, wr: dict, wall_s: float) -> dict:
        """The run's figures, once every node exited (their exit codes)."""
        totals = {'chunks': 0, 'episodes': 0, 'successes': 0, 'env_s': 0.0, 'loop_s': 0.0, 'wait_s': 0.0}
        for n in self.env_names:
            for k in totals:
                totals[k] += type(totals[k])(self.stat(n, k, 0))
        return {'wall_s': wall_s, 'collector': col, 'writer': wr, 'failed': failed, **totals,
                'interrupted': self.interrupted,
                'exit_codes': {n: p.returncode for n, p in self.procs.items()}, 'logs': self.logs}

    def failed(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() not in (None, 0)]

    def run(self, num_env_nodes: int, drain_timeout_s: float, extra_nodes: Optional[dict] = None) -> dict:
        """Start, wait for the env nodes, drain, stop; the figures of the run."""
        try:
            self.start_pipeline(num_env_nodes, extra_nodes)
            self.wait_env_nodes()
            failed = self.failed()
            col, wr = self.drain(drain_timeout_s)
            wall = time.monotonic() - self.t0
        finally:
            self.stop()
        return self.result(failed, col, wr, wall)
