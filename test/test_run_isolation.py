"""A robot moves only on its own run's commands (#37): the run guard (ROS-free), the signature of a
command over the wire, a pipeline under attack on its own topics, and two runs in one ROS domain."""
import json
import os
import re
import subprocess
import sys
import threading

import pytest
import torch

from rl_traj_ros.delivery.run_guard import RunGuard, new_secret_file, read_secret
from rl_traj_ros.pipelines import sim_collect as sc

from rosutil import ROOT, ros_process, stop_process


# -- the guard ----------------------------------------------------------------------------------
def test_another_runs_messages_are_counted_and_warned_once_per_run_and_topic():
    warned = []
    g = RunGuard('mine', None, False, warned.append)
    assert g.admit('/t', 'mine') and not g.admit('/t', 'theirs') and not g.admit('/t', 'theirs')
    assert not g.admit('/u', 'theirs') and not g.admit('/t', '')
    assert g.counters['foreign'] == 4 and len(warned) == 3 and "'theirs'" in warned[0] and '/t' in warned[0]


def test_a_command_is_taken_signed_by_the_runs_secret_and_refused_unsigned_or_forged():
    key = b'k' * 32
    g = RunGuard('r', key, True, lambda line: None)
    body = [b'the keys', b'the actions']
    good = g.sign(body)
    assert len(good) == 32 and g.admit('/a', 'r', good, lambda: body)
    assert not g.admit('/a', 'r', b'', lambda: body)                                   # unsigned
    assert not g.admit('/a', 'r', good, lambda: [b'the keys', b'other actions'])       # payload changed
    assert not g.admit('/a', 'r', RunGuard('r', b'x' * 32, True, print).sign(body), lambda: body)  # other secret
    assert g.counters == {'foreign': 0, 'unsigned': 1, 'forged': 2}
    relaxed = RunGuard('r', key, False, print)   # sim: unsigned commands may pass, wrong signatures never
    assert relaxed.admit('/a', 'r', b'', lambda: body) and not relaxed.admit('/a', 'r', b'\0' * 32, lambda: body)
    with pytest.raises(ValueError, match='require_signed'):
        RunGuard('r', None, True, print)


def test_secret_files_are_owner_only_and_refused_otherwise_naming_the_file(tmp_path):
    path = new_secret_file('run-1', str(tmp_path / 'keys'))
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(tmp_path / 'keys').st_mode & 0o777 == 0o700
    assert len(read_secret(path)) == 32 and read_secret(path) != read_secret(new_secret_file('run-2', str(tmp_path)))
    os.chmod(path, 0o640)
    with pytest.raises(ValueError, match=f'secret_file .*{re.escape(path)}.* readable by others'):
        read_secret(path)
    bad = tmp_path / 'bad.key'
    bad.write_text('not hex')
    os.chmod(bad, 0o600)
    with pytest.raises(ValueError, match='hex'):
        read_secret(str(bad))
    with pytest.raises(ValueError, match='cannot read'):
        read_secret(str(tmp_path / 'missing.key'))


def test_a_commands_signature_survives_the_wire_and_covers_every_field():
    """Signed as published, checked as received (deserialized in another process's way); a change
    to any field (an action, a key, the run id, the stamp) breaks it."""
    from rclpy.serialization import deserialize_message, serialize_message

    from rl_traj_ros import msg as M
    from rl_traj_ros.ros.run_link import canonical
    g = RunGuard('r', b's' * 32, True, print)
    chunk = M.ActionChunk(run_id='r', model_version=3)
    chunk.sources = [M.TrajectorySource(key=M.TrajectoryKey(step_id=1, chunk_id=2), size=2, offset=0)]
    chunk.actions.name, chunk.actions.dtype, chunk.actions.shape = 'actions', 'float32', [2, 28]
    chunk.actions.data = bytes(range(224))
    weights = M.PolicyWeights(run_id='r', model_version=4, sha256='ab', path='/w.pt')
    weights.data = b'\x01\x02'
    teleop = M.Intervention(run_id='r', source_device='spacemouse', action=[0.1] * 7, active=True)
    for m in (chunk, weights, teleop):
        m.header.stamp.sec = 7
        m.auth = g.sign(canonical(m))
        got = deserialize_message(serialize_message(m), type(m))
        assert g.admit('/c', 'r', bytes(got.auth), lambda: canonical(got)), type(m).__name__
        got.header.stamp.nanosec = 1
        assert not g.admit('/c', 'r', bytes(got.auth), lambda: canonical(got)), type(m).__name__
    for change in (lambda m: setattr(m.actions, 'data', bytes(223) + b'\x09'),
                   lambda m: setattr(m.sources[0].key, 'chunk_id', 3), lambda m: setattr(m, 'run_id', 'q')):
        got = deserialize_message(serialize_message(chunk), M.ActionChunk)
        change(got)
        assert not g.admit('/c', 'r', bytes(got.auth), lambda: canonical(got))


# -- over DDS ---------------------------------------------------------------------------------------
def _params(tmp, run_id, key):
    """20 chunks at 40 control steps/s (2 s: the attacker, started first, is matched for most)."""
    p = sc.apply_overrides(sc.load_params(sc.DEFAULT_CONFIG), num_env_nodes=1, num_envs=2, steps=1,
                           output_dir=str(tmp), image_obs=False, run_id=run_id)
    for n in sc.NODES:
        p[n].update(num_epochs=2, chunks_per_epoch=10, run_id=run_id, secret_file=key)
    p['franka_env_node'].update(collect_episodes=False, camera_topic_rate_hz=0.0, require_signed=True,
                                control_rate_hz=40.0)
    return p


def _stored(directory):
    from rl_traj_ros.storage.files import load_trajectory
    index = json.loads((directory / 'trajectory_index.json').read_text())
    return [load_trajectory(directory / f'trajectory_{i:08d}.pt', 'pt') for i in index['trajectory_ids']]


def _env_counters(run_dir) -> dict:
    line = next(x for x in (run_dir / 'node_logs' / 'env_0.log').read_text().splitlines() if ': done: ' in x)
    return {k: float(v) for k, v in re.findall(r'(\w+)=([-\d.e]+)', line.split(': done: ', 1)[1])}


def test_forged_unsigned_foreign_and_wrong_shaped_chunks_never_move_the_env(tmp_path):
    """An attacker answers every request before the policy node: another run's chunk, an unsigned
    one, one with a wrong HMAC, and one signed with the run's own secret but of the wrong shape.
    The env refuses each (counted), executes only the policy's chunks, and the run ends as a run
    without the attacker: its buffer equals the in-process run's, tensor for tensor."""
    key = new_secret_file('attacked', str(tmp_path / 'keys'))
    with ros_process(['test/forger.py', '--run-id', 'attacked', '--secret-file', key]) as forger:
        r = sc.run_ros(_params(tmp_path / 'ros', 'attacked', key), 1, str(tmp_path / 'ros'), quiet=True)
    sent = {k: int(v) for k, v in re.findall(r'(\w+)=(\d+)', forger.stdout.read().split('sent ', 1)[1])}
    assert not r['failed'] and all(c in (0, -2) for c in r['exit_codes'].values()), r['exit_codes']
    env = _env_counters(tmp_path / 'ros')
    print(f'forger sent {sent}; the env counted {env}')
    assert sent['forged'] >= 10   # (the requests before DDS matched the attacker went unanswered by it)
    assert all(env[k] >= sent[k] - 1 for k in ('forged', 'unsigned', 'foreign'))  # (-1: after the env's last chunk)
    assert env['rejected'] >= 1 and env['chunks'] == 20   # wrong shapes that came first: as if they had not come
    ref = sc.run_inprocess(_params(tmp_path / 'ref', 'attacked', key), 1, str(tmp_path / 'ref'))
    got, want = _stored(tmp_path / 'ros' / 'replay_buffer'), _stored(tmp_path / 'ref' / 'replay_buffer')
    assert r['chunks'] == ref['chunks'] == 20 and len(got) == len(want) > 0
    for a, b in zip(got, want):
        assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.timeout(480)
def test_two_sim_train_runs_in_one_domain_both_finish_as_if_each_ran_alone(tmp_path):
    """Same topics, same node names, same services, one ROS domain: each run's learner ends with
    the weights of the same run in one process, and each run dropped the other's messages."""
    def cli(out, *extra):
        cmd = [sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_train', '--steps', '3', '--output-dir', str(out),
               *extra]  # not --quiet: a failed run shows its nodes' last lines
        try:  # (~30 s alone) within the test's own timeout, so that a run that hangs shows what it printed
            return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=200)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(cmd, 'timed out', str(e.stdout or ''), str(e.stderr or ''))
    done = {}
    runs = [threading.Thread(target=lambda k=k: done.__setitem__(k, cli(tmp_path / k))) for k in ('a', 'b')]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    ref = cli(tmp_path / 'ref', '--in-process')
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    want = torch.load(tmp_path / 'ref' / 'learner' / 'learner_checkpoint.pt', weights_only=True)['model']
    for k in ('a', 'b'):
        assert done[k].returncode == 0, done[k].stdout[-3000:] + done[k].stderr[-3000:]
        got = torch.load(tmp_path / k / 'learner' / 'learner_checkpoint.pt', weights_only=True)['model']
        worst = max(float((got[n] - want[n]).abs().max()) for n in want)
        env = _env_counters(tmp_path / k)
        print(f'run {k}: max weight difference to the lone in-process run {worst:.3g}; env {env}')
        assert worst < 1e-5 and env['foreign'] > 0 and env['chunks'] == 30


def test_a_real_robot_env_node_without_the_runs_secret_refuses_to_start():
    """env_type franky requires signed commands by default: without a secret_file nothing could be
    checked, so the node exits 1 before it connects to anything, naming what to give it."""
    out = subprocess.run([sys.executable, '-m', 'rl_traj_ros.nodes.franka_env_node', '--ros-args', '-p',
                          'env_type:=franky', '-p', 'robot_ip:=127.0.0.1', '-p', 'topic_prefix:=/no_secret'],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    said = out.stdout + out.stderr
    assert out.returncode == 1 and 'secret_file' in said and 'require_signed' in said, said[-2000:]


def test_a_real_robot_env_node_takes_only_its_runs_signed_lifecycle_transitions(rclpy_context, tmp_path):
    """require_signed (a real robot's default; set here on a sim node): ChangeState, which carries no
    signature, is refused; a transition signed with another secret, of another run, or replayed is
    refused; the run's signed configure and activate are taken (``pipelines.lifecycle``)."""
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState, GetState
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from rl_traj_ros import srv as S
    from rl_traj_ros.pipelines.lifecycle import request
    from rl_traj_ros.ros.compat import call
    key = new_secret_file('lc-run', str(tmp_path))
    env = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.nodes.franka_env_node', '--ros-args', '-r',
                            '__ns:=/lc', '-p', 'autostart:=false', '-p', 'require_signed:=true', '-p', 'run_id:=lc-run',
                            '-p', f'secret_file:={key}', '-p', 'image_obs:=false', '-p', 'collect_episodes:=false',
                            '-p', 'topic_prefix:=/lc_test', '-p', 'num_steps:=0'],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    node = Node('lc_driver', context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    try:
        signed = node.create_client(S.SignedChangeState, '/lc/franka_env_node/signed_change_state')
        plain = node.create_client(ChangeState, '/lc/franka_env_node/change_state')
        state = node.create_client(GetState, '/lc/franka_env_node/get_state')
        assert signed.wait_for_service(timeout_sec=60.0)
        assert not call(plain, ChangeState.Request(transition=Transition(id=Transition.TRANSITION_CONFIGURE)), 60,
                        executor=ex).success
        wrong = request('configure', 'lc-run', b'w' * 32)
        assert not call(signed, wrong, 60, executor=ex).success
        other = request('configure', 'another-run', read_secret(key))
        assert not call(signed, other, 60, executor=ex).success
        assert call(state, GetState.Request(), 60, executor=ex).current_state.label == 'unconfigured'
        good = request('configure', 'lc-run', read_secret(key))
        r = call(signed, good, 120, executor=ex)
        assert r.success, r.message
        replay = call(signed, good, 60, executor=ex)
        assert not replay.success and 'replay' in replay.message
        r = call(signed, request('activate', 'lc-run', read_secret(key)), 60, executor=ex)
        assert r.success and call(state, GetState.Request(), 60, executor=ex).current_state.label == 'active'
    finally:
        stop_process(env)
        node.destroy_node()
    out = env.stdout.read()
    assert 'refused a lifecycle transition on ~/change_state' in out and 'not signed by run' in out, out[-3000:]
