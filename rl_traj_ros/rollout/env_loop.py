"""The env side's protocol around ``EnvWorker``, ROS-free: request, resend, timeout, pacing, gates.

What the env node runs in its rollout thread, with the transport given as callables (the node
passes its publisher; a test passes a queue), so the protocol is tested without DDS:

- **request / reply**: each request goes out once its consumer is there (``consumer_ready``:
  the policy's reader matched), again every ``request_resend_s`` while no reply came (the
  policy dedupes by key), and the run fails naming the chunk after ``reply_timeout_s``; a reply
  counts only for the sources the loop is waiting for (``deliver``, from the transport's thread).
- **pacing** (``RatePacer``): at most ``control_rate_hz`` control steps a second, a sim stepping
  like the robot it stands for, so a learner trains between steps as it would there.
- **motion gates**: nothing moves while the node is not active (``active``), nor while a
  required teleop device is missing (``TeleopGate``); both are checked before the first reset
  (which moves the robot home) and before every chunk is executed.
- **interventions** (``InterventionLatch``): the operator's newest command, valid for
  ``intervention_timeout_s``, which ``EnvWorker`` applies to the chunk it executes.
- **phases** (``Phase``): what the loop is doing and since when, so that a stall names its
  place (an env step or reset that does not return, a policy reader that never appears) instead
  of a run that just stops moving; ``EnvRunner`` watches it.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ..data.schema import PolicyInput
from ..delivery.resend import RESEND, TIMEOUT, ReplyWait
from .workers import EnvWorker

Log = Callable[[str], None]


class Phase:
    """The loop's current phase and when it began; ``stalled(after_s)`` describes it once it
    lasted longer (a deliberate hold, not active or waiting for the teleop device, never is)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.enter('making the env')

    def enter(self, what: str, deliberate: bool = False) -> None:
        self.what, self.deliberate, self.since = what, deliberate, self.clock()
        self.warned_at = float('-inf')

    def stalled(self, after_s: float) -> Optional[str]:
        age = self.clock() - self.since
        if self.deliberate or age <= after_s:
            return None
        return f'{self.what}: not done after {age:.0f} s'


class InterventionLatch:
    """The newest Intervention (action, active, env_index), for ``timeout_s`` after it arrived:
    a device that stops publishing stops intervening."""

    def __init__(self, action_dim: int, timeout_s: float, clock: Callable[[], float] = time.monotonic):
        self.action_dim, self.timeout_s, self.clock = action_dim, timeout_s, clock
        self._latest: Optional[tuple[float, tuple[np.ndarray, bool, int]]] = None
        self._last_stamp: dict[str, int] = {}   # per source device: the newest header stamp taken

    def offer(self, action, active: bool, env_index: int, stamp_ns: int = 0, source: str = '') -> Optional[str]:
        """Keep it; or why not (wrong length, non-finite, not newer than its source's last: a
        replayed command), to be logged."""
        if len(action) != self.action_dim:
            return f'ignored Intervention with {len(action)} dims (expected {self.action_dim})'
        action = np.asarray(action, np.float32)
        if not np.isfinite(action).all():
            return f'ignored Intervention of {source or "a device"} with non-finite actions'
        if stamp_ns and stamp_ns <= self._last_stamp.get(source, 0):
            return f'ignored Intervention of {source or "a device"} stamped no later than its last one (a replay?)'
        if stamp_ns:
            self._last_stamp[source] = stamp_ns
        self._latest = (self.clock(), (action, bool(active), int(env_index)))
        return None

    def __call__(self) -> Optional[tuple[np.ndarray, bool, int]]:
        latest = self._latest
        if latest is None or self.clock() - latest[0] > self.timeout_s:
            return None
        return latest[1]


class RatePacer:
    """No faster than ``rate_hz`` control steps a second, ``chunk`` of them per request (0: as
    fast as the policy answers); a stall does not bank time for a burst after it."""

    def __init__(self, rate_hz: float, chunk: int, stop: threading.Event):
        self.rate_hz, self.chunk, self.stop = rate_hz, chunk, stop
        self._next_at = 0.0

    def wait(self) -> None:
        if self.rate_hz <= 0:
            return
        now = time.monotonic()
        if self._next_at > now:
            self.stop.wait(self._next_at - now)
        self._next_at = max(self._next_at, now) + self.chunk / self.rate_hz


class TeleopGate:
    """With ``required``: motion only once a teleop device publishes (``publishers()`` > 0);
    waits up to ``timeout_s``, then fails (``failed``) with the reason. Nothing moves meanwhile."""

    def __init__(self, required: bool, timeout_s: float, publishers: Callable[[], int], topic: str,
                 stop: threading.Event, info: Log, warn: Log, error: Log):
        self.required, self.timeout_s, self.publishers, self.topic, self.stop = required, timeout_s, publishers, \
            topic, stop
        self.info, self.warn, self.error = info, warn, error
        self.failed = False

    def present(self) -> bool:
        if not self.required or self.publishers() > 0:
            return True
        self.warn(f'no teleop device publishes on {self.topic}: holding the robot still (up to {self.timeout_s} s)')
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline and not self.stop.is_set():
            if self.publishers() > 0:
                self.info(f'teleop device on {self.topic}: moving')
                return True
            time.sleep(0.1)
        if not self.stop.is_set():
            self.error(f'no teleop device on {self.topic} within {self.timeout_s} s: stopping without sending a '
                       'motion command (is the SpaceMouse/GELLO connected?)')
            self.failed = True
        return False


@dataclass
class Transport:
    """How requests leave: ``encode`` once per request (resends reuse the encoded message),
    ``publish`` it, ``consumer_ready`` while the policy's reader is not there yet."""
    encode: Callable[[PolicyInput], Any]
    publish: Callable[[Any], None]
    consumer_ready: Callable[[], bool]


class EnvLoop:
    def __init__(self, worker: EnvWorker, transport: Transport, resend_s: float, timeout_s: float,
                 pacer: RatePacer, gate: TeleopGate, active: threading.Event, stop: threading.Event,
                 before_request: Callable[[PolicyInput], None] = lambda req: None,
                 after_chunk: Callable[[], None] = lambda: None):
        self.worker, self.transport, self.pacer, self.gate = worker, transport, pacer, gate
        self.active, self.stop = active, stop
        self.before_request, self.after_chunk = before_request, after_chunk
        self.reply_wait = ReplyWait(resend_s, timeout_s)
        self.timeout_s = timeout_s
        self._reply = threading.Event()
        self._actions = None
        self._waiting_for = None
        self.phase = Phase()
        self.t_first: Optional[float] = None   # first request sent (after discovery)
        self.wait_s = 0.0                        # blocked on the policy's reply: the round trip as the env sees it
        self.rejected = 0                        # replies with the wrong shape, dtype or non-finite actions

    def deliver(self, sources, actions) -> Optional[str]:
        """A reply (any thread): taken when it answers the request in flight with actions of this
        env's shape; a wrong one is counted in ``rejected`` and is as if it had not come (the
        request is resent, then times out), and why is returned to be logged."""
        if self._waiting_for is None or sources != self._waiting_for:
            return None
        why = self.worker.wrong_actions(actions)
        if why is not None:
            self.rejected += 1
            return f'rejected ActionChunk for {[s.key.as_tuple() for s in sources]}: {why}'
        self._actions = actions.clone()
        self._reply.set()
        return None

    def may_move(self) -> bool:
        """Block while not active (nothing moves); False when stopping or the teleop device is missing."""
        self.phase.enter('holding: not active, or no teleop device yet', deliberate=True)
        while not self.active.wait(0.1):
            if self.stop.is_set():
                return False
        return self.gate.present()

    def _end(self, obs, env_part=None) -> None:
        """After a stop: a terminal request, with the EnvPart of the chunk executed last if it was
        not sent yet. It also tells the policy node that this env sends no more requests (the node
        stops waiting for it while the env still flushes its episodes: ``delivery.stop``)."""
        if self.transport.consumer_ready():
            req = PolicyInput([], obs, env_part)
            self.before_request(req)
            self.transport.publish(self.transport.encode(req))

    def run(self) -> None:
        """Until the worker's last request went out, or a stop; raises TimeoutError when the
        policy does not answer a chunk in time."""
        if not self.may_move():   # before reset: resetting moves the robot home
            return
        gen = self.worker.run()
        self.phase.enter('the first reset (the robot moving home)')
        req = next(gen)
        while True:
            if self.stop.is_set():
                # stopped after executing a chunk: its EnvPart goes out as a terminal request
                # (what the policy node relays to the collector at a normal end), not lost
                return self._end(req.obs, req.env_part)
            self.before_request(req)
            msg = self.transport.encode(req)
            if not req.sources:  # terminal request: carries the last EnvPart only
                self.transport.publish(msg)
                return
            self._waiting_for = req.sources
            self._reply.clear()
            key = req.sources[0].key.as_tuple()
            self.phase.enter(f'waiting for the policy node to subscribe to the request for {key}')
            while not self.transport.consumer_ready():
                if self.stop.is_set():  # Ctrl-C while no policy node is up: stop at once
                    return self._end(req.obs)
                time.sleep(0.05)
            if self.t_first is None:
                self.t_first = time.monotonic()
            self.pacer.wait()
            self.transport.publish(msg)
            self.reply_wait.sent()
            self.phase.enter(f'waiting for the action chunk for {key} (resent every {self.reply_wait.resend_s:g} s)')
            while not self._reply.wait(0.1):
                if self.stop.is_set():  # (this request carried the last EnvPart)
                    return self._end(req.obs)
                due = self.reply_wait.poll()
                if due == RESEND:
                    self.transport.publish(msg)
                elif due == TIMEOUT:
                    raise TimeoutError(f'no action chunk for {req.sources[0].key.as_tuple()} within {self.timeout_s} s')
            self.wait_s += self.reply_wait.waited_s()
            if not self.may_move():   # deactivated: hold here; the operator's device went away: no motion
                return
            self.phase.enter(f'executing chunk {key}: env.step (an episode end resets: the robot moving home)')
            req = gen.send(self._actions)
            self.phase.enter(f'recording and publishing after chunk {key}')
            self.after_chunk()


__all__ = ['EnvLoop', 'InterventionLatch', 'Phase', 'RatePacer', 'TeleopGate', 'Transport']
