"""The request protocols the nodes run, without ROS: the policy's gate and the env's reply wait."""
from rl_traj_ros.data.schema import TrajectoryKey
from rl_traj_ros.delivery.gate import ANSWER, DUPLICATE, HOLD, REPEAT, WAIT, PolicyGate
from rl_traj_ros.delivery.resend import RESEND, TIMEOUT, ReplyWait
from rl_traj_ros.delivery.stop import StopDrain


def key(step, chunk=0):
    return TrajectoryKey(step, 0, 0, 0, chunk)


class Weights:
    """Stands in for PolicyWorker.ready_for: version v answers steps <= v + lag."""
    def __init__(self):
        self.version = 0

    def ready_for(self, step, lag):
        return self.version >= step - lag


def test_synchronous_gate_waits_for_the_learner_then_for_each_steps_weights():
    w = Weights()
    gate = PolicyGate(w.ready_for, max_version_lag=0)
    assert gate.admit(key(0), 'r0') == WAIT            # no learner yet: it would miss step 0
    assert gate.admit(key(0), 'r0') == DUPLICATE       # re-sent while waiting: not kept twice
    assert gate.learner_present() == ['r0']            # the learner announced v0: step 0 answers
    assert gate.admit(key(1), 'r1') == WAIT            # step 1 needs v1
    assert gate.learner_present() == []                # a replay of v0 releases nothing
    w.version = 1
    assert gate.learner_present() == ['r1'] and not gate.waiting
    assert gate.admit(key(1, 1), 'r1b') == ANSWER


def test_a_resent_request_gets_the_same_reply_and_the_memory_is_bounded():
    gate = PolicyGate(Weights().ready_for, remember=2)
    for c in range(3):
        assert gate.admit(key(0, c), f'r{c}') == ANSWER
        gate.answered(key(0, c), f'chunk{c}')
    assert gate.admit(key(0, 2), 'again') == REPEAT and gate.reply_for(key(0, 2)) == 'chunk2'
    assert gate.admit(key(0, 0), 'again') == ANSWER    # forgotten (oldest of 3 with room for 2)
    assert gate.counters['duplicate_requests'] == 1


def test_backpressure_holds_requests_until_acks_bring_the_unacked_keys_down():
    gate = PolicyGate(Weights().ready_for, max_unacked=2)
    assert gate.admit(key(0, 0), 'a', unacked=2) == ANSWER
    assert gate.admit(key(0, 1), 'b', unacked=3) == HOLD
    assert gate.admit(key(0, 2), 'c', unacked=3) == HOLD
    assert gate.next_held(3) is None                   # still over the bound
    assert gate.next_held(2) == 'b'                    # one at a time: each answer adds unacked keys
    assert gate.next_held(3) is None
    assert gate.next_held(1) == 'c' and gate.next_held(0) is None
    assert gate.counters['held'] == 2


def test_reply_wait_resends_on_schedule_and_gives_up_at_the_deadline():
    now = [100.0]
    w = ReplyWait(resend_s=5.0, timeout_s=12.0, clock=lambda: now[0])
    w.sent()
    seen = []
    for t in range(1, 14):
        now[0] = 100.0 + t
        seen.append((t, w.poll()))
    assert [t for t, d in seen if d == RESEND] == [6, 12]
    assert [t for t, d in seen if d == TIMEOUT] == [13]
    assert w.waited_s() == 13.0


def test_stop_drain_waits_for_upstream_then_delivery_and_gives_up_at_its_deadline():
    """After a stop signal a node serves until its upstream has been gone for the grace period and
    what it sent is acknowledged; an upstream that comes back restarts the grace; the deadline ends
    the wait naming what was left."""
    now, upstream, delivered = [10.0], [2], [False]
    drain = StopDrain(lambda: upstream[0], lambda: delivered[0], deadline_s=3.0, grace_s=0.25, clock=lambda: now[0])
    drain.start(9.5)  # the signal came 0.5 s ago
    assert drain.poll() is None
    upstream[0] = 0
    assert drain.poll() is None              # gone, grace not over
    now[0] += 0.2
    upstream[0] = 1                           # a publisher seen again (rediscovery): the grace starts over
    assert drain.poll() is None
    upstream[0] = 0
    now[0] += 0.01
    assert drain.poll() is None
    now[0] += 0.3
    assert drain.poll() is None              # upstream done, not delivered yet
    delivered[0] = True
    assert drain.poll().startswith('upstream done and everything delivered')
    late = StopDrain(lambda: 1, lambda: True, deadline_s=3.0, clock=lambda: now[0])
    late.start(now[0] - 3.0)
    assert late.poll() == 'stop deadline (3 s) reached: 1 upstream publishers still there'
    undelivered = StopDrain(lambda: 0, lambda: False, deadline_s=1.0, clock=lambda: now[0])
    undelivered.start(now[0] - 1.5)
    assert 'not everything sent was acknowledged' in undelivered.poll()
