"""policy_node: answers PolicyInputs with action chunks and publishes both parts of each chunk.

Per request: infer -> ActionChunk back to the env and the PolicyPart; then the attached EnvPart
of the previous chunk is completed and published. Only this node publishes parts: the trajectory
stream has one producer and one ordering boundary (spec §2). Parts are resent until the
collector acknowledges their keys (``delivery.outbox``). Weights (TRANSIENT_LOCAL) answer from
the next training step on, their ``model_version`` stamped into every chunk and part; when a
request may be answered (``max_version_lag``, the learner's presence, backpressure, a resent
request) is ``delivery.gate.PolicyGate``'s decision.
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

from contextlib import contextmanager

from rclpy.node import Node

from .. import msg as M
from ..delivery.gate import ANSWER, REPEAT, WAIT, PolicyGate
from ..delivery.outbox import Outbox
from ..learning import weights as W
from ..params.policy_node import POLICY_NODE
from ..assembly import make_policy_worker
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS, WEIGHTS_QOS
from .common import declare, run_node, topic, wait_acked


class PolicyNode(Node):
    def __init__(self):
        super().__init__('policy_node')
        p = declare(self, POLICY_NODE)
        self.worker = make_policy_worker(p)
        self.pub_action = self.create_publisher(M.ActionChunk, topic(self, 'action_chunk'), DATA_QOS)
        self.pub_policy = self.create_publisher(M.PolicyPart, topic(self, 'policy_part'), DATA_QOS)
        self.pub_env = self.create_publisher(M.EnvPart, topic(self, 'env_part'), DATA_QOS)
        self.create_subscription(M.PolicyInput, topic(self, 'policy_input'), self.on_request, DATA_QOS)
        self.create_subscription(M.KeyAck, topic(self, 'key_ack'), self.on_ack, DATA_QOS)
        self.create_subscription(M.PolicyWeights, topic(self, 'policy_weights'), self.on_weights, WEIGHTS_QOS)
        self.gate = PolicyGate(self.worker.ready_for, p['max_version_lag'], p['max_unacked_keys'])
        # parts stay here until the collector acknowledged their keys: every row stored (resent to a new collector)
        self.policy_out = Outbox(self.pub_policy.publish, p['resend_after_s'])
        self.env_out = Outbox(self.pub_env.publish, p['resend_after_s'])
        self.create_timer(1.0, self._tick)
        self.counters = {'requests': 0, 'rejected': 0, 'policy_parts': 0, 'env_parts': 0, 'weight_updates': 0,
                         'weights_rejected': 0, 'waiting_for_weights': 0, 'model_version': p['model_version']}
        what = self.worker.model.describe() if hasattr(self.worker.model, 'describe') else p['policy']
        self.get_logger().info(f"policy '{p['policy']}' ready (C={p['chunk']}, A={p['action_dim']}): {what}")

    def on_request(self, m: M.PolicyInput) -> None:
        self.counters['requests'] += 1
        try:
            req = cv.policy_input_from_msg(m)
        except (ValueError, TypeError) as e:  # malformed request: counted, logged, node stays up
            self.counters['rejected'] += 1
            self.get_logger().error(f'rejected PolicyInput: {e}')
            return
        key = req.sources[0].key if req.sources else None
        verdict = self.gate.admit(key, req, len(self.policy_out))
        if verdict == REPEAT:  # the env re-sent a request we answered: the same chunk again
            self.pub_action.publish(self.gate.reply_for(key))
        elif verdict == WAIT:
            self._complete(req)  # the learner needs the previous chunk's EnvPart to finish its step
            self.counters['waiting_for_weights'] = len(self.gate.waiting)
        elif verdict == ANSWER:
            self._answer(req)

    def on_weights(self, m: M.PolicyWeights) -> None:
        version = int(m.model_version)
        if version <= self.worker.model_version:  # the learner's start-up weights, or a replay
            if not self.gate.learner_seen:
                self.get_logger().info(f'learner present (its weights v{version})')
                self._release_waiting()
            return
        self.gate.learner_seen = True
        try:
            sd = W.unpack(bytes(m.data), m.sha256) if len(m.data) else W.load_file(m.path, m.sha256)
            first = self.worker.set_weights(sd, version)
        except Exception as e:  # noqa: BLE001 - bad weights are refused, the node keeps its current ones
            self.counters['weights_rejected'] += 1
            self.get_logger().error(f'refused weights v{version}: {e}')
            return
        self.counters['weight_updates'] += 1
        self.counters['model_version'] = version
        self.get_logger().info(f'weights v{version} ({len(m.data) or m.path}) answer from step {first} on')
        self._release_waiting()

    def _release_waiting(self) -> None:
        for req in self.gate.learner_present():
            self._infer(req)
        self.counters['waiting_for_weights'] = len(self.gate.waiting)

    def _answer(self, req) -> None:
        self._infer(req)
        self._complete(req)

    @contextmanager
    def _rejecting(self):
        """A request the worker cannot answer (shapes, values): counted, logged, the node stays up."""
        try:
            yield
        except (ValueError, TypeError) as e:
            self.counters['rejected'] += 1
            self.get_logger().error(f'rejected PolicyInput: {e}')

    def _infer(self, req) -> None:
        with self._rejecting():
            if req.sources:
                key = req.sources[0].key
                chunk, part = self.worker.infer(req)
                out = cv.action_chunk_to_msg(chunk)
                out.header.stamp = self.get_clock().now().to_msg()
                self.pub_action.publish(out)
                self.gate.answered(key, out)
                pm = cv.policy_part_to_msg(part, chunk.model_version)  # the version that answered this step
                pm.header.stamp = out.header.stamp
                self.policy_out.send(key, [s.key for s in part.sources], pm, matched=self._consumers())
                self.counters['policy_parts'] += 1

    def _complete(self, req) -> None:
        with self._rejecting():
            env_part = self.worker.complete(req)
            if env_part is not None:
                em = cv.env_part_to_msg(env_part)
                em.header.stamp = self.get_clock().now().to_msg()
                self.env_out.send(env_part.sources[0].key, [s.key for s in env_part.sources], em,
                                  matched=self._consumers())
                self.counters['env_parts'] += 1

    def on_ack(self, m: M.KeyAck) -> None:
        keys = [cv.key_from_msg(k) for k in m.keys]
        self.policy_out.ack(keys)
        self.env_out.ack(keys)
        while (req := self.gate.next_held(len(self.policy_out))) is not None:
            self._answer(req)

    def _consumers(self) -> int:
        """Collectors matched on both part topics (what the outboxes resend to)."""
        return min(self.pub_policy.get_subscription_count(), self.pub_env.get_subscription_count())

    def _tick(self) -> None:
        for out in (self.policy_out, self.env_out):
            out.tick(self._consumers())

    def shutdown(self) -> None:
        wait_acked(self, (self.pub_action, self.pub_policy, self.pub_env))
        self.worker.close()
        counters = {**self.counters, **self.gate.counters, 'resent': self.policy_out.resent + self.env_out.resent}
        self.get_logger().info(f'counters: {counters}, parts without a KeyAck: {len(self.policy_out)}')
        if len(self.policy_out):  # the collector still held them: an episode or step not completed
            self.get_logger().info(f'{len(self.policy_out)} chunks were not acknowledged as stored (see the '
                                   "collector's last lines)")


def main(args=None) -> int:
    return run_node(PolicyNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
