"""The env node's protocol without ROS (``rollout.env_loop``): the same EnvLoop the node runs,
driven here through a transport of plain callables and the real MuJoCo env: resends, the reply
timeout, pacing, the teleop gate and the lifecycle's hold."""
import threading
import time

import pytest
import torch

from rl_traj_ros.assembly import make_env, rollout_config
from rl_traj_ros.params.env_node import ENV_NODE
from rl_traj_ros.params.spec import resolve
from rl_traj_ros.rollout.env_loop import EnvLoop, InterventionLatch, RatePacer, TeleopGate, Transport
from rl_traj_ros.rollout.env_run import EnvRunner
from rl_traj_ros.rollout.workers import EnvWorker


@pytest.fixture(scope='module')
def params():
    return resolve(ENV_NODE, {'num_envs': 1, 'chunk': 2, 'num_epochs': 1, 'chunks_per_epoch': 3, 'num_steps': 1,
                              'image_obs': False, 'collect_episodes': False, 'camera_topic_rate_hz': 0.0})


class Policy:
    """The policy's side: answers every request it sees (after ``drop`` of them are lost) from
    another thread, as the node's subscription would."""

    def __init__(self, drop=0, answer=True):
        self.drop, self.answer, self.sent, self.loop = drop, answer, [], None

    def publish(self, req):
        self.sent.append((time.monotonic(), req))
        if not req.sources or not self.answer or len(self.sent) <= self.drop:
            return
        threading.Timer(0.01, self.loop.deliver, (req.sources, torch.zeros(1, 14))).start()


def make_loop(params, policy, required_teleop=False, publishers=lambda: 1, rate_hz=0.0, resend_s=0.2,
              timeout_s=5.0, active=True):
    stop, on = threading.Event(), threading.Event()
    if active:
        on.set()
    env = make_env(params)
    worker = EnvWorker(rollout_config(params), env, InterventionLatch(7, 0.5))
    messages = []
    gate = TeleopGate(required_teleop, 0.3, publishers, '/rl_traj/intervention', stop, messages.append,
                      messages.append, messages.append)
    loop = EnvLoop(worker, Transport(lambda req: req, policy.publish, lambda: True), resend_s, timeout_s,
                   RatePacer(rate_hz, params['chunk'], stop), gate, on, stop)
    policy.loop = loop
    return loop, env, stop, messages


def test_a_lost_request_is_sent_again_and_the_steps_complete(params):
    policy = Policy(drop=1)
    loop, env, _, _ = make_loop(params, policy)
    try:
        loop.run()
    finally:
        env.close()
    keyed = [r for _, r in policy.sent if r.sources]
    assert [r.sources[0].key.chunk_id for r in keyed] == [0, 0, 1, 2]   # chunk 0 again after the loss
    assert not policy.sent[-1][1].sources and policy.sent[-1][1].env_part is not None   # the last EnvPart
    assert loop.worker.stats.chunks == 3


def test_no_reply_fails_the_run_naming_the_chunk(params):
    loop, env, _, _ = make_loop(params, Policy(answer=False), resend_s=0.1, timeout_s=0.5)
    try:
        with pytest.raises(TimeoutError, match=r'no action chunk for \(0, 0, 0, 0, 0\) within 0.5 s'):
            loop.run()
    finally:
        env.close()


def test_nothing_moves_without_the_teleop_device_or_while_inactive(params):
    policy = Policy()
    loop, env, _, messages = make_loop(params, policy, required_teleop=True, publishers=lambda: 0)
    try:
        loop.run()
    finally:
        env.close()
    assert loop.gate.failed and not policy.sent and loop.worker.stats.chunks == 0
    assert any('no teleop device on /rl_traj/intervention' in m for m in messages)
    loop, env, stop, _ = make_loop(params, policy, active=False)   # configured, not activated
    threading.Timer(0.3, stop.set).start()
    try:
        loop.run()
    finally:
        env.close()
    assert not policy.sent and loop.worker.stats.chunks == 0


def test_pacing_holds_the_control_rate(params):
    policy = Policy()
    loop, env, _, _ = make_loop(params, policy, rate_hz=20.0)
    try:
        loop.run()
    finally:
        env.close()
    times = [t for t, r in policy.sent if r.sources]
    # 2 control steps per request at 20 Hz, however fast the policy answers: request i goes out no
    # earlier than 0.1 s x i after the first (a deadline schedule: a request sent late by the machine's
    # load shortens the next gap, it never lets one out early; 10 ms for the first one's own lateness)
    assert len(times) == 3 and all(t - times[0] >= 0.1 * i - 0.01 for i, t in enumerate(times)), times
    assert times[-1] - times[0] >= 0.2 - 0.01, times


def test_an_intervention_counts_for_its_timeout_only():
    now = [0.0]
    latch = InterventionLatch(7, 0.5, clock=lambda: now[0])
    assert latch.offer([0.0] * 6, True, 0) == 'ignored Intervention with 6 dims (expected 7)' and latch() is None
    assert latch.offer([0.1] * 7, True, -1) is None
    action, active, env = latch()
    assert active and env == -1 and action.shape == (7,)
    now[0] = 0.6
    assert latch() is None   # the device went quiet: no more intervening


def test_joint_positions_come_from_the_env_state_names_through_the_recorder(tmp_path):
    """The env node's joint_states (what GELLO and the scripted operator follow) are read where the
    env's state names say, also when CollectEpisode wraps the env."""
    from rl_traj_ros.assembly import joint_positions
    from rl_traj_ros.envs.batched import BatchedEnv
    from rl_traj_ros.envs.franky_env import STATE_NAMES
    from rl_traj_ros.episodes import CollectEpisode

    class Robot:
        state_names = STATE_NAMES
    batched = BatchedEnv([Robot()], lambda i, raw: raw, 'task')
    recorded = CollectEpisode(batched, str(tmp_path), rank=0, num_envs=1, export_format='pickle')
    assert joint_positions(batched) == joint_positions(recorded) == list(range(13, 20))
    assert [STATE_NAMES[i] for i in joint_positions(recorded)] == [f'fr3_joint{i}.pos' for i in range(1, 8)]
    from rl_traj_ros.episodes.collect_episode import env_attr
    assert env_attr(recorded, 'num_envs') == 1 and env_attr(recorded, 'no_such_attribute') is None


class StuckEnv:
    """The real env, whose ``stuck_at``-th step does not return until released: a reset against a
    robot that never arrives home, a step whose motion never completes."""

    def __init__(self, env, stuck_at):
        self.env, self.stuck_at, self.steps, self.release = env, stuck_at, 0, threading.Event()

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        self.steps += 1
        if self.steps == self.stuck_at:
            self.release.wait(60.0)
        return self.env.step(action)


@pytest.mark.parametrize('stuck', ['env_step', 'no_policy_reader'])
def test_the_watchdog_names_where_the_loop_is_stuck(params, stuck):
    """A run that stops moving says where: the env step of chunk 1 (the 3rd step of 2-step
    chunks), or the policy node's reader that never appeared; and the loop goes on once released."""
    policy, warnings, envs = Policy(), [], []

    def make():
        envs.append(StuckEnv(make_env(params), stuck_at=3 if stuck == 'env_step' else 0))
        return envs[-1]

    def make_loop_over(env):
        gate = TeleopGate(False, 1.0, lambda: 1, '/t', runner.stop, print, print, print)
        policy.loop = EnvLoop(EnvWorker(rollout_config(params), env, InterventionLatch(7, 0.5)),
                              Transport(lambda r: r, policy.publish, lambda: stuck != 'no_policy_reader'), 0.5, 60.0,
                              RatePacer(0.0, 2, runner.stop), gate, runner.active, runner.stop)
        return policy.loop

    runner = EnvRunner(make, make_loop_over, lambda: None, lambda made: None, print, warnings.append, stall_warn_s=1.0)
    assert runner.start(60.0) is None
    runner.active.set()
    deadline = time.monotonic() + 30.0
    while not warnings and time.monotonic() < deadline:
        time.sleep(0.05)
    if stuck == 'env_step':
        assert warnings and 'executing chunk (0, 0, 0, 0, 1): env.step' in warnings[0], warnings
        envs[0].release.set()
        runner.thread.join(60.0)
        assert runner.exit_code == 0 and runner.stats(3)['chunks'] == 3
    else:
        assert warnings and 'waiting for the policy node to subscribe to the request for (0, 0, 0, 0, 0)' in \
            warnings[0], warnings
        runner.end()
        assert runner.stats(3)['chunks'] == 0
    assert 'not done after' in warnings[0]
