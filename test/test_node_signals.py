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
