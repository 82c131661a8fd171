"""The policy's admission of requests: answer now, wait for weights, hold back, or repeat.

- **Weights gate** (``max_version_lag`` >= 0): a request of step ``s`` is answered only with
  the weights of update ``s - lag`` or newer (0: synchronous PPO), and nothing is answered
  before a learner announced itself (it would miss the first step's trajectories). A waiting
  request's previous EnvPart still goes out at once: the learner needs it to finish its step.
- **Backpressure**: while more chunk keys are unacknowledged downstream than
  ``max_unacked``, new requests are held (answered once acks come back), so a slow writer
  slows the robot instead of growing memory without bound.
- **Re-sent requests**: a request the env sent again (its reply was lost) is answered with
  the same chunk from a bounded memory of recent answers, never inferred twice.

The policy node and the in-process run (``sim_collect.run_inprocess``) use this one object.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any, Callable, Hashable, Optional

from ..params.defaults import POLICY

ANSWER, REPEAT, DUPLICATE, WAIT, HOLD = 'answer', 'repeat', 'duplicate', 'wait', 'hold'


class PolicyGate:
    def __init__(self, ready_for: Callable[[int, int], bool], max_version_lag: int = POLICY.max_version_lag,
                 max_unacked: Optional[int] = None, remember: int = 256):
        """``ready_for(step, lag)``: whether the current weights may answer ``step``
        (``PolicyWorker.ready_for``); ``max_unacked`` None: no backpressure."""
        self.ready_for, self.max_lag, self.max_unacked = ready_for, max_version_lag, max_unacked
        self.remember = remember
        self.learner_seen = False
        self.waiting: OrderedDict[Hashable, Any] = OrderedDict()   # key -> request held for its weights
        self.held: deque = deque()                                  # requests held by backpressure
        self._answers: OrderedDict[Hashable, Any] = OrderedDict()  # key -> the reply sent
        self.counters = {'duplicate_requests': 0, 'held': 0}

    def weights_ready(self, step: int) -> bool:
        if self.max_lag < 0:
            return True
        return self.learner_seen and self.ready_for(step, self.max_lag)

    def admit(self, key: Optional[Hashable], request: Any, unacked: int = 0) -> str:
        """What to do with a request: ``ANSWER`` it; ``REPEAT`` the reply in ``reply_for(key)``;
        ``DUPLICATE`` (already waiting: ignore); ``WAIT`` (kept until its weights: complete its
        previous EnvPart now); ``HOLD`` (kept until acks come back)."""
        if key is not None and key in self._answers:
            self.counters['duplicate_requests'] += 1
            return REPEAT
        if key is not None and key in self.waiting:
            self.counters['duplicate_requests'] += 1
            return DUPLICATE
        if key is not None and not self.weights_ready(key.step_id):
            self.waiting[key] = request
            return WAIT
        if self.max_unacked is not None and unacked > self.max_unacked:
            self.counters['held'] += 1
            self.held.append(request)
            return HOLD
        return ANSWER

    def answered(self, key: Hashable, reply: Any) -> None:
        self._answers[key] = reply
        while len(self._answers) > self.remember:
            self._answers.popitem(last=False)

    def reply_for(self, key: Hashable) -> Any:
        return self._answers[key]

    def learner_present(self) -> list:
        """A learner announced itself (or new weights came): the waiting requests now ready."""
        self.learner_seen = True
        ready = [k for k in self.waiting if self.weights_ready(k.step_id)]
        return [self.waiting.pop(k) for k in ready]

    def next_held(self, unacked: int) -> Optional[Any]:
        """The next held request to answer now that acks came back, or None while ``unacked``
        keys are still over the bound (call again after each answer)."""
        if self.held and (self.max_unacked is None or unacked <= self.max_unacked):
            return self.held.popleft()
        return None


__all__ = ['PolicyGate', 'ANSWER', 'REPEAT', 'DUPLICATE', 'WAIT', 'HOLD']
