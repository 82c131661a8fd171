"""Fault-injection harness around the real multi-process pipeline (tests only, not shipped).

``run_with_faults`` runs the pipeline as ``run sim_collect`` does (``RosRun``) while
``chaos(run)`` injects faults from a thread: ``run.kill(name)``, ``run.restart(name)``, keyed
to progress (``run.wait_stat``) or to what a node logged (``run.wait_log``), not to wall time.
``prefix`` runs nodes under another command (``ip netns exec``); ``slow_disk_s`` runs the
writer node on a disk that sleeps before each trajectory file (``slow_disk_writer.py``).
"""
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from rl_traj_ros.pipelines import sim_collect as sc
from rl_traj_ros.pipelines.ros_run import RosRun

HERE = Path(__file__).resolve().parent


class FaultRun(RosRun):
    """``RosRun`` with ``chaos(run)`` started once the nodes are, and a node's death not ending
    the run (the chaos may have killed it on purpose)."""

    def __init__(self, params: dict, workdir: str, chaos, prefix: Optional[dict] = None, slow_disk_s: float = 0.0):
        super().__init__(sc.params_yaml(params), workdir, quiet=True,
                         extra_env={'SLOW_DISK_S': str(slow_disk_s)} if slow_disk_s else None)
        self.chaos, self.prefix, self.slow_disk_s = chaos, prefix or {}, slow_disk_s

    def start_pipeline(self, num_env_nodes, extra_nodes=None):
        super().start_pipeline(num_env_nodes, extra_nodes)
        threading.Thread(target=self.chaos, args=(self,), daemon=True).start()

    def wait_env_nodes(self, stop_when_a_node_dies=True):
        super().wait_env_nodes(stop_when_a_node_dies=False)

    def command(self, name, module, extra):
        cmd = super().command(name, module, extra)
        if name == 'writer' and self.slow_disk_s:
            cmd = [sys.executable, str(HERE / 'slow_disk_writer.py'), *cmd[3:]]
        return [*self.prefix.get(name, []), *cmd]

    def wait_log(self, name: str, text: str, timeout_s: float = 120.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.logs[name])):
                return True
            time.sleep(0.1)
        return False

    def wait_stat(self, name: str, key: str, at_least: float, timeout_s: float = 120.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.stat(name, key) >= at_least:
                return True
            time.sleep(0.1)
        return False

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        os.killpg(self.procs[name].pid, sig)
        self.procs[name].wait()


def run_with_faults(params: dict, num_env_nodes: int, workdir: str, chaos, drain_timeout_s: float = 120.0,
                    prefix: Optional[dict] = None, slow_disk_s: float = 0.0) -> dict:
    """Like ``sim_collect.run_ros``, with ``chaos`` injecting faults while the env nodes work."""
    return FaultRun(params, workdir, chaos, prefix, slow_disk_s).run(num_env_nodes, drain_timeout_s)
