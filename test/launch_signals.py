"""Signals as `ros2 launch` sends them, replayed on a pipeline's node processes (launch itself is
on no registry CI reaches, so the suite cannot run it).

A terminal Ctrl-C signals the whole foreground process group: launch and every node it started.
launch then signals each node itself (SIGINT, at once or later: 0.7 s was seen), SIGTERM if it is
still running 5 s later and SIGKILL 5 s after that (launch 3.x ``ExecuteProcess``'s
``sigterm_timeout`` and ``sigkill_timeout``). ``LaunchLikeRun`` starts a ``RosRun``'s nodes as
executed processes in one process group, as launch's children are, and ``ctrl_c`` replays that
sequence, recording when each node exited and how.
"""
import os
import signal
import subprocess
import time

from rl_traj_ros.pipelines.ros_run import RosRun

SIGTERM_AFTER_S = 5.0
SIGKILL_AFTER_S = 10.0


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LaunchLikeRun(RosRun):
    def __init__(self, params_yaml: str, workdir, **kw):
        super().__init__(params_yaml, str(workdir), quiet=True, fork_nodes=False, **kw)
        # the terminal's foreground group (launch's place in it): a leader that outlives the Ctrl-C
        self.leader = subprocess.Popen(['sleep', '3600'], process_group=0, preexec_fn=_ignore_sigint)

    def process_group(self) -> dict:
        return {'process_group': self.leader.pid}

    def wait_for(self, name: str, key: str, at_least: float, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.stat(name, key, 0) < at_least:
            assert time.monotonic() < deadline, f'{name}: {key} < {at_least} after {timeout_s} s'
            assert not self.failed(), f'nodes failed before the signal: {self.failed()}'
            self.spin(0.05)

    def wait_connected(self, timeout_s: float = 60.0) -> None:
        """Until the collector joined a chunk and matched a writer: a Ctrl-C before DDS discovery
        paired them loses what the collector holds (it says so), which is not what these tests measure."""
        self.wait_for('collector', 'joined', 1, timeout_s)
        self.wait_for('collector', 'writers', 1, timeout_s)

    def ctrl_c(self, gap_s: float) -> dict[str, tuple[int, float, str]]:
        """SIGINT to the group, after ``gap_s`` SIGINT to each node still running, SIGTERM at 5 s,
        SIGKILL at 10 s: each node's (exit code, seconds after the first signal, the last signal it got)."""
        t0 = time.monotonic()
        os.killpg(self.leader.pid, signal.SIGINT)
        ended, got = {}, {n: 'SIGINT' for n in self.procs}
        sent = set()
        while len(ended) < len(self.procs) and time.monotonic() - t0 < SIGKILL_AFTER_S + 5:
            t = time.monotonic() - t0
            for n, p in self.procs.items():
                if n not in ended and p.poll() is not None:
                    ended[n] = (p.returncode, round(t, 2), got[n])
            for at, sig in ((gap_s, signal.SIGINT), (SIGTERM_AFTER_S, signal.SIGTERM),
                            (SIGKILL_AFTER_S, signal.SIGKILL)):
                if t >= at and (at, sig) not in sent:
                    sent.add((at, sig))
                    for n, p in self.procs.items():
                        if n not in ended and p.poll() is None:
                            got[n] = sig.name
                            p.send_signal(sig)
            self.spin(0.005)  # the run's own reader of /diagnostics keeps reading, as launch's would
        return ended

    def stop(self) -> None:
        if any(p.poll() is None for p in self.procs.values()):  # a failed test: the nodes go too
            os.killpg(self.leader.pid, signal.SIGINT)
            deadline = time.monotonic() + SIGKILL_AFTER_S
            while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
                time.sleep(0.05)
            os.killpg(self.leader.pid, signal.SIGKILL)
        super().stop()
        self.leader.kill()
        self.leader.wait()
