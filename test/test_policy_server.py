"""The policy node's protocol without ROS (``rollout.policy_server``) and the env node's rollout
thread (``rollout.env_run``): the objects the nodes run, driven here with the real MuJoCo env,
the real actor-critic and in-memory transports: parts until acknowledged, repeats, the weights
gate, backpressure, rejections; the env made, run and closed in one thread."""
import threading

import pytest
import torch

from rl_traj_ros.assembly import make_env, make_policy_worker, rollout_config
from rl_traj_ros.params.env_node import ENV_NODE
from rl_traj_ros.params.spec import resolve
from rl_traj_ros.rollout.env_loop import EnvLoop, InterventionLatch, RatePacer, TeleopGate, Transport
from rl_traj_ros.rollout.env_run import EnvRunner
from rl_traj_ros.rollout.policy_server import PolicyServer, PolicyTransport
from rl_traj_ros.rollout.workers import EnvWorker

SHAPE = {'num_envs': 1, 'chunk': 2, 'num_epochs': 1, 'chunks_per_epoch': 3, 'state_dim': 21, 'action_dim': 7}


@pytest.fixture(scope='module')
def params():
    return resolve(ENV_NODE, {**SHAPE, 'num_steps': 2, 'image_obs': False, 'collect_episodes': False,
                              'camera_topic_rate_hz': 0.0})


class Wire:
    """What the server sent, per kind; the transport hands messages through unencoded."""

    def __init__(self):
        self.chunks, self.resent, self.policy, self.env, self.log = [], [], [], [], []

    def transport(self) -> PolicyTransport:
        def chunk(c):
            self.chunks.append(c)
            return c
        return PolicyTransport(chunk, self.resent.append, lambda part, v: (part, v), lambda part: part,
                               self.policy.append, self.env.append, lambda: 1)


def server(wire, lag=-1, max_unacked=1000, policy='mlp'):
    worker = make_policy_worker({**SHAPE, 'policy': policy, 'hidden': 32, 'use_images': False})
    return PolicyServer(worker, wire.transport(), lag, max_unacked, 30.0, wire.log.append, wire.log.append)


def requests(params):
    """Every PolicyInput of a 2-step run of the real env, the env answered with zero actions."""
    env = make_env(params)
    try:
        worker, out = EnvWorker(rollout_config(params), env), []
        gen = worker.run()
        req = next(gen)
        while True:
            out.append(req)
            try:
                req = gen.send(torch.zeros(1, 14))
            except StopIteration:
                return out
    finally:
        env.close()


def keys(parts):
    return [p.sources[0].key.as_tuple() for p in parts]


def test_every_chunk_is_answered_once_and_its_parts_wait_for_the_collector(params):
    wire, reqs = Wire(), requests(params)
    s = server(wire)
    for r in reqs:
        s.request(r)
    assert len(wire.chunks) == len(wire.policy) == 6 and len(wire.env) == 6   # 2 steps x 3 chunks, each part once
    assert keys([p for p, _ in wire.policy]) == keys(wire.env)
    s.request(reqs[2])   # the env re-sent a request (its reply was lost): the same chunk, not inferred again
    assert wire.resent == [wire.chunks[2]] and len(wire.chunks) == 6 and s.summary()['duplicate_requests'] == 1
    assert s.summary()['unacked'] == 6
    s.ack([p.sources[0].key for p, _ in wire.policy[:4]])
    assert s.summary()['unacked'] == 2 and len(s.env_out) == 2


def test_a_request_waits_for_its_weights_while_its_previous_envpart_goes_out(params):
    wire, reqs = Wire(), requests(params)
    s = server(wire, lag=0)
    s.weights(0, dict, 'announcement')   # the learner announces itself with its start-up weights
    assert wire.log == ['learner present (its weights v0)']
    for r in reqs[:3]:
        s.request(r)
    assert len(wire.chunks) == 3   # step 0
    s.request(reqs[3])             # step 1 waits for update 0's weights; chunk 2's EnvPart goes out now
    assert len(wire.chunks) == 3 and len(wire.env) == 3 and s.counters['waiting_for_weights'] == 1
    s.weights(1, lambda: {'nope': torch.zeros(1)}, 'bad')   # refused: the node keeps its weights
    assert s.counters['weights_rejected'] == 1 and len(wire.chunks) == 3
    sd = {k: v + 0.01 for k, v in s.worker.model.state_dict().items()}
    s.weights(1, lambda: sd, 'inline')
    assert len(wire.chunks) == 4 and wire.chunks[-1].model_version == 1 and s.counters['waiting_for_weights'] == 0
    assert wire.log[-1] == 'weights v1 (inline) answer from step 1 on'


def test_backpressure_holds_requests_until_acks_come_back(params):
    wire, reqs = Wire(), requests(params)
    s = server(wire, max_unacked=0)
    for r in reqs[:4]:
        s.request(r)
    assert len(wire.chunks) == 1 and s.summary()['held'] == 3   # one unacknowledged chunk: the rest held
    s.ack([wire.policy[0][0].sources[0].key])
    assert len(wire.chunks) == 2   # one answered; the next waits for the ack of that one
    s.ack([wire.policy[1][0].sources[0].key])
    assert len(wire.chunks) == 3 and len(wire.env) == 2   # the first request carries no EnvPart


def test_a_request_the_policy_cannot_answer_is_counted_and_the_server_goes_on(params):
    wire, reqs = Wire(), requests(params)
    s = server(wire)
    bad = reqs[0]
    bad.obs['states'] = bad.obs['states'][:, :5]   # wrong state width
    s.request(bad)
    assert s.counters['rejected'] == 1 and not wire.chunks and wire.log[-1].startswith('rejected PolicyInput')
    s.request(reqs[1])
    assert len(wire.chunks) == 1


def test_the_runner_makes_runs_and_closes_the_env_in_one_thread(params):
    seen = {}
    wire, s = Wire(), None

    def make():
        seen['make'] = threading.current_thread().name
        return make_env(params)

    def make_loop(env):
        inner_close = env.close
        env.close = lambda: (seen.__setitem__('close', threading.current_thread().name), inner_close())
        loop = EnvLoop(EnvWorker(rollout_config(params), env, InterventionLatch(7, 0.5)),
                       Transport(lambda r: r, publish, lambda: True), 1.0, 10.0, RatePacer(0.0, 2, runner.stop),
                       TeleopGate(False, 1.0, lambda: 0, '/t', runner.stop, print, print, print), runner.active,
                       runner.stop)
        return loop

    def publish(req):   # the policy server answers in the transport's thread, as the node's executor would
        s.request(req)
        if req.sources:
            threading.Timer(0.01, runner.loop.deliver, (req.sources, wire.chunks[-1].actions)).start()

    s = server(wire)
    runner = EnvRunner(make, make_loop, lambda: seen.setdefault('before_close', True),
                       lambda made: seen.setdefault('made', made), wire.log.append)
    assert runner.start(60.0) is None
    runner.active.set()
    runner.thread.join(60.0)
    assert seen == {'make': 'env-loop', 'close': 'env-loop', 'before_close': True, 'made': True}
    st = runner.stats(3)
    assert (st['steps'], st['chunks'], st['exit_code'], st['finished']) == (2, 6, 0, 1) and runner.finished
    assert runner.progress() is None and len(wire.env) == 6   # 6 chunks: not a multiple of 10; every EnvPart out
    assert runner.start(1.0).startswith('configure after cleanup')


def test_an_env_that_cannot_be_made_fails_the_start_and_nothing_runs():
    runner = EnvRunner(lambda: (_ for _ in ()).throw(ConnectionError('robot 127.0.0.9 unreachable')),
                       lambda env: pytest.fail('no loop without an env'), lambda: None, lambda made: None, print)
    assert runner.start(10.0) == 'robot 127.0.0.9 unreachable'
    assert runner.exit_code == 1 and runner.finished and runner.stats(1)['chunks'] == 0
