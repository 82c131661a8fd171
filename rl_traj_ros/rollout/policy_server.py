"""The policy side's protocol around ``PolicyWorker``, ROS-free: admit, answer, complete, resend.

Per request: the attached EnvPart of the previous chunk is completed; then infer -> the action
chunk back to the env and the PolicyPart. Only the policy publishes parts, so the trajectory
stream has one producer and one ordering boundary (spec §2). Parts stay in an ``Outbox`` until
the collector acknowledges their keys (resent to a new collector). When a request may be
answered (``max_version_lag``, the learner's presence, backpressure, a resent request) is
``delivery.gate.PolicyGate``'s decision; weights answer from the next training step on.

The transport is given as callables (``PolicyTransport``): the policy node encodes and
publishes; a test passes lists (``test/test_policy_server.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..delivery.gate import ANSWER, REPEAT, WAIT, PolicyGate
from ..delivery.outbox import Outbox
from .workers import PolicyWorker

Log = Callable[[str], None]


@dataclass
class PolicyTransport:
    """``chunk(ActionChunk)`` encodes and sends a reply and returns what it sent (a resent
    request gets it again through ``resend_chunk``); ``policy_part(PolicyPart, version)`` and
    ``env_part(EnvPart)`` encode, ``publish_policy`` / ``publish_env`` send (the outboxes resend
    what they encoded); ``consumers()``: collectors matched on both part topics."""
    chunk: Callable[[Any], Any]
    resend_chunk: Callable[[Any], None]
    policy_part: Callable[[Any, int], Any]
    env_part: Callable[[Any], Any]
    publish_policy: Callable[[Any], None]
    publish_env: Callable[[Any], None]
    consumers: Callable[[], int]


class PolicyServer:
    def __init__(self, worker: PolicyWorker, transport: PolicyTransport, max_version_lag: int, max_unacked: int,
                 resend_after_s: float, info: Log, error: Log):
        self.worker, self.t, self.info, self.error = worker, transport, info, error
        self.gate = PolicyGate(worker.ready_for, max_version_lag, max_unacked)
        self.policy_out = Outbox(transport.publish_policy, resend_after_s)
        self.env_out = Outbox(transport.publish_env, resend_after_s)
        self.counters = {'requests': 0, 'rejected': 0, 'policy_parts': 0, 'env_parts': 0, 'weight_updates': 0,
                         'weights_rejected': 0, 'waiting_for_weights': 0, 'model_version': worker.model_version,
                         'ended_envs': 0}
        self.ended_envs: set[str] = set()  # the senders of terminal requests: env nodes that sent their last one

    def reject(self, why: Exception) -> None:
        """A request that cannot be answered (malformed, wrong shapes): counted, logged, nothing else."""
        self.counters['rejected'] += 1
        self.error(f'rejected PolicyInput: {why}')

    def request(self, req, sender: str = '') -> None:
        """A decoded PolicyInput from ``sender`` (the env node's name; ``rejected`` counts the
        malformed ones)."""
        self.counters['requests'] += 1
        key = req.sources[0].key if req.sources else None
        if key is None:
            self.ended_envs.add(sender)
            self.counters['ended_envs'] = len(self.ended_envs)
        verdict = self.gate.admit(key, req, len(self.policy_out))
        if verdict == REPEAT:  # the env re-sent a request already answered: the same chunk again
            self.t.resend_chunk(self.gate.reply_for(key))
        elif verdict == WAIT:
            self._complete(req)  # the learner needs the previous chunk's EnvPart to finish its step
            self.counters['waiting_for_weights'] = len(self.gate.waiting)
        elif verdict == ANSWER:
            self._answer(req)

    def weights(self, version: int, load: Callable[[], dict], what: Any) -> None:
        """Weights ``version`` (``load()`` gives the state dict, checked): newer ones answer from
        the next step on; older or equal ones (the learner's start-up announcement, a replay) only
        tell that a learner is there."""
        if version <= self.worker.model_version:
            if not self.gate.learner_seen:
                self.info(f'learner present (its weights v{version})')
                self._release_waiting()
            return
        self.gate.learner_seen = True
        try:
            first = self.worker.set_weights(load(), version)
        except Exception as e:  # noqa: BLE001 - bad weights are refused, the policy keeps its current ones
            self.counters['weights_rejected'] += 1
            self.error(f'refused weights v{version}: {e}')
            return
        self.counters['weight_updates'] += 1
        self.counters['model_version'] = version
        self.info(f'weights v{version} ({what}) answer from step {first} on')
        self._release_waiting()

    def ack(self, keys) -> None:
        """The collector stored these chunk keys: their parts are released, held requests answered."""
        self.policy_out.ack(keys)
        self.env_out.ack(keys)
        while (req := self.gate.next_held(len(self.policy_out))) is not None:
            self._answer(req)

    def tick(self) -> None:
        """Resend what no collector acknowledged in time (a new collector gets it at once)."""
        for out in (self.policy_out, self.env_out):
            out.tick(self.t.consumers())

    def _release_waiting(self) -> None:
        for req in self.gate.learner_present():
            self._infer(req)
        self.counters['waiting_for_weights'] = len(self.gate.waiting)

    def _answer(self, req) -> None:
        """The previous chunk's EnvPart first (it may complete the step a learner waits for; in one
        process its update then answers this request), then this chunk."""
        self._complete(req)
        self._infer(req)

    def _infer(self, req) -> None:
        if not req.sources:
            return
        key = req.sources[0].key
        try:
            chunk, part = self.worker.infer(req)
            sent = self.t.chunk(chunk)
            msg = self.t.policy_part(part, chunk.model_version)  # the version that answered this step
        except (ValueError, TypeError) as e:
            return self.reject(e)
        self.gate.answered(key, sent)
        self.policy_out.send(key, [s.key for s in part.sources], msg, matched=self.t.consumers())
        self.counters['policy_parts'] += 1

    def _complete(self, req) -> None:
        try:
            env_part = self.worker.complete(req)
            msg = self.t.env_part(env_part) if env_part is not None else None
        except (ValueError, TypeError) as e:
            return self.reject(e)
        if env_part is not None:
            self.env_out.send(env_part.sources[0].key, [s.key for s in env_part.sources], msg,
                              matched=self.t.consumers())
            self.counters['env_parts'] += 1

    def summary(self) -> dict:
        return {**self.counters, **self.gate.counters, 'resent': self.policy_out.resent + self.env_out.resent,
                'unacked': len(self.policy_out)}


__all__ = ['PolicyServer', 'PolicyTransport']
