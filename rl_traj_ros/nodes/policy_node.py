"""policy_node: answers PolicyInputs with action chunks and publishes both parts of each chunk.

Per request: infer -> ActionChunk back to the env, PolicyPart published at once; then the
attached EnvPart of the previous chunk is completed (next obs resolved, terminal values
inferred when requested) and published. Only this node publishes parts, so the trajectory
stream has one producer and one ordering boundary (spec §2).

Weights: the learner publishes PolicyWeights (RELIABLE + TRANSIENT_LOCAL, so a restarted
policy node gets the latest); they answer from the next training step on, with their
``model_version`` stamped into every ActionChunk and PolicyPart. ``max_version_lag`` >= 0
holds a request for step ``s`` until the node has the weights of update ``s - lag``
(0: synchronous PPO), and every request until a learner announced itself with its start-up
weights (so it misses no trajectory); the previous chunk's EnvPart is completed and sent at
once, so the learner always gets the step it is waiting for.
"""
from __future__ import annotations

from rclpy.node import Node

from collections import OrderedDict, deque

from .. import msg as M
from ..learning import weights as W
from ..delivery.outbox import Outbox
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS, WEIGHTS_QOS
from ..rollout.workers import make_policy_worker
from .common import declare, run_node, topic, wait_acked


class PolicyNode(Node):
    def __init__(self):
        super().__init__('policy_node')
        p = declare(self, {
            'policy': ('expert', "'expert' (scripted pick-cube), 'mlp' (sample the actor-critic) or 'zero' "
                                 '(hold still: demonstrations driven by teleop)'),
            'state_dim': (21, 'length of obs/states'),
            'action_dim': (7, 'A: actions per control step'),
            'chunk': (4, 'C: control steps per action chunk'),
            'hidden': (128, 'hidden width of the actor-critic MLP'),
            'use_images': (False, 'add a CNN over obs/main_images'),
            'image_size': (128, 'camera size when use_images'),
            'weights': ('', 'state_dict file (loaded with weights_only=True); empty: seeded init'),
            'seed': (0, 'model init and per-key sampling seed'),
            'device': ('cpu', "'cpu' or 'cuda'"),
            'model_version': (0, 'version stamped on every PolicyPart'),
            'collect_transitions': (False, 'keep next_obs in EnvParts (rollout.collect_transitions)'),
            'expert_noise': (0.0, 'std of Gaussian noise on the expert (diversity)'),
            'resend_after_s': (30.0, 'resend parts whose keys the writer has not acknowledged after this long'),
            'max_unacked_keys': (2000, 'backpressure: stop answering new requests while more keys are unacked'),
            'max_version_lag': (-1, 'answer a request of step s only with the weights of update >= s - lag '
                                    '(0: synchronous PPO); -1: never wait for weights'),
        })
        if p['chunk'] < 1 or p['action_dim'] < 1:
            raise ValueError('chunk and action_dim must be >= 1')
        self.worker = make_policy_worker(p)
        self.pub_action = self.create_publisher(M.ActionChunk, topic(self, 'action_chunk'), DATA_QOS)
        self.pub_policy = self.create_publisher(M.PolicyPart, topic(self, 'policy_part'), DATA_QOS)
        self.pub_env = self.create_publisher(M.EnvPart, topic(self, 'env_part'), DATA_QOS)
        self.create_subscription(M.PolicyInput, topic(self, 'policy_input'), self.on_request, DATA_QOS)
        self.create_subscription(M.KeyAck, topic(self, 'key_ack'), self.on_ack, DATA_QOS)
        self.create_subscription(M.PolicyWeights, topic(self, 'policy_weights'), self.on_weights, WEIGHTS_QOS)
        self.max_lag = p['max_version_lag']
        self._waiting: OrderedDict = OrderedDict()  # key -> request held until its weights arrive
        self._learner_seen = False  # with max_version_lag >= 0 nothing is answered before the learner is up
        # parts stay here until the collector acknowledged their keys: every row stored (resent to a new collector)
        self.policy_out = Outbox(self.pub_policy.publish, p['resend_after_s'])
        self.env_out = Outbox(self.pub_env.publish, p['resend_after_s'])
        self.create_timer(1.0, self._tick)
        self.max_unacked = p['max_unacked_keys']
        self._held: deque = deque()                 # requests waiting for acks (backpressure)
        self._answered: OrderedDict = OrderedDict()  # key -> ActionChunk msg, for re-sent requests
        self.counters = {'requests': 0, 'rejected': 0, 'policy_parts': 0, 'env_parts': 0, 'duplicate_requests': 0,
                         'held': 0, 'weight_updates': 0, 'weights_rejected': 0, 'waiting_for_weights': 0,
                         'model_version': p['model_version']}
        self.get_logger().info(f"policy '{p['policy']}' ready (C={p['chunk']}, A={p['action_dim']})")

    def on_request(self, m: M.PolicyInput) -> None:
        self.counters['requests'] += 1
        try:
            req = cv.policy_input_from_msg(m)
        except (ValueError, TypeError) as e:  # malformed request: counted, logged, node stays up
            self.counters['rejected'] += 1
            self.get_logger().error(f'rejected PolicyInput: {e}')
            return
        key = req.sources[0].key if req.sources else None
        if key is not None and key in self._answered:  # the env re-sent a request we answered
            self.counters['duplicate_requests'] += 1
            self.pub_action.publish(self._answered[key])
            return
        if key is not None and key in self._waiting:  # re-sent while it waits for weights
            self.counters['duplicate_requests'] += 1
            return
        if key is not None and not self._weights_ready(key.step_id):
            self._complete(req)  # the learner needs the previous chunk's EnvPart to finish its step
            self._waiting[key] = req
            self.counters['waiting_for_weights'] = len(self._waiting)
            return
        if len(self.policy_out) > self.max_unacked:
            self.counters['held'] += 1
            self._held.append(req)  # answered once the writer caught up
            return
        self._answer(req)

    def _weights_ready(self, step: int) -> bool:
        if self.max_lag < 0:
            return True
        if not self._learner_seen:  # no learner yet: it would miss the first step's trajectories
            return False
        return self.worker.ready_for(step, self.max_lag)

    def on_weights(self, m: M.PolicyWeights) -> None:
        version = int(m.model_version)
        if version <= self.worker.model_version:  # the learner's start-up weights, or a replay
            if not self._learner_seen:
                self._learner_seen = True
                self.get_logger().info(f'learner present (its weights v{version})')
                self._release_waiting()
            return
        self._learner_seen = True
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
        for key in [k for k in self._waiting if self._weights_ready(k.step_id)]:
            self._infer(self._waiting.pop(key))
        self.counters['waiting_for_weights'] = len(self._waiting)

    def _answer(self, req) -> None:
        self._infer(req)
        self._complete(req)

    def _infer(self, req) -> None:
        try:
            if req.sources:
                key = req.sources[0].key
                chunk, part = self.worker.infer(req)
                out = cv.action_chunk_to_msg(chunk)
                out.header.stamp = self.get_clock().now().to_msg()
                self.pub_action.publish(out)
                self._answered[key] = out
                while len(self._answered) > 256:
                    self._answered.popitem(last=False)
                pm = cv.policy_part_to_msg(part, chunk.model_version)  # the version that answered this step
                pm.header.stamp = out.header.stamp
                self.policy_out.send(key, [s.key for s in part.sources], pm, matched=self._consumers())
                self.counters['policy_parts'] += 1
        except (ValueError, TypeError) as e:
            self.counters['rejected'] += 1
            self.get_logger().error(f'rejected PolicyInput: {e}')

    def _complete(self, req) -> None:
        try:
            env_part = self.worker.complete(req)
            if env_part is not None:
                em = cv.env_part_to_msg(env_part)
                em.header.stamp = self.get_clock().now().to_msg()
                self.env_out.send(env_part.sources[0].key, [s.key for s in env_part.sources], em,
                                  matched=self._consumers())
                self.counters['env_parts'] += 1
        except (ValueError, TypeError) as e:
            self.counters['rejected'] += 1
            self.get_logger().error(f'rejected PolicyInput: {e}')

    def on_ack(self, m: M.KeyAck) -> None:
        keys = [cv.key_from_msg(k) for k in m.keys]
        self.policy_out.ack(keys)
        self.env_out.ack(keys)
        while self._held and len(self.policy_out) <= self.max_unacked:
            self._answer(self._held.popleft())

    def _consumers(self) -> int:
        """Collectors matched on both part topics (what the outboxes resend to)."""
        return min(self.pub_policy.get_subscription_count(), self.pub_env.get_subscription_count())

    def _tick(self) -> None:
        matched = self._consumers()
        self.policy_out.tick(matched)
        self.env_out.tick(matched)

    def shutdown(self) -> None:
        wait_acked(self, (self.pub_action, self.pub_policy, self.pub_env))
        self.counters['resent'] = self.policy_out.resent + self.env_out.resent
        self.get_logger().info(f'counters: {self.counters}, unacked parts: {len(self.policy_out)}')


def main(args=None) -> int:
    return run_node(PolicyNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
