"""policy_node: answers PolicyInputs with action chunks and publishes both parts of each chunk.

The protocol (admit, answer, complete, resend until acknowledged, weights from the next step)
is ``rollout.policy_server.PolicyServer``; this node decodes, calls it, and encodes. Weights
arrive on a TRANSIENT_LOCAL topic, inline or as a checked file; their ``model_version`` is
stamped into every chunk and part.
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

from rclpy.node import Node

from .. import msg as M
from ..assembly import make_policy_worker
from ..learning import weights as W
from ..params.policy_node import POLICY_NODE
from ..rollout.policy_server import PolicyServer, PolicyTransport
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS, WEIGHTS_QOS
from ..ros.run_link import RunLink
from .common import all_acked, declare, run_node, stop_drain, topic, wait_acked


class PolicyNode(Node):
    def __init__(self):
        super().__init__('policy_node')
        p = declare(self, POLICY_NODE)
        worker, self.link = make_policy_worker(p), RunLink(self, p)
        self.pub_action = self.link.publisher(M.ActionChunk, topic(self, 'action_chunk'), DATA_QOS)
        self.pub_policy = self.link.publisher(M.PolicyPart, topic(self, 'policy_part'), DATA_QOS)
        self.pub_env = self.link.publisher(M.EnvPart, topic(self, 'env_part'), DATA_QOS)
        self.link.subscription(M.PolicyInput, topic(self, 'policy_input'), self.on_request, DATA_QOS)
        self.link.subscription(M.KeyAck, topic(self, 'key_ack'), self.on_ack, DATA_QOS)
        self.link.subscription(M.PolicyWeights, topic(self, 'policy_weights'), self.on_weights, WEIGHTS_QOS)
        transport = PolicyTransport(self._chunk, self.pub_action.publish, self._policy_part, self._env_part,
                                    self.pub_policy.publish, self.pub_env.publish, self._consumers)
        log = self.get_logger()
        self.server = PolicyServer(worker, transport, p['max_version_lag'], p['max_unacked_keys'],
                                   p['resend_after_s'], log.info, log.error)
        self.create_timer(1.0, self.server.tick)
        # after a stop signal: until every env sent its last request (or is gone) and a collector has every
        # part (DDS acks; one that matches late gets the unacknowledged ones resent by the 1 s tick)
        self.stop_drain = stop_drain(self, ('policy_input',), lambda: (self._consumers() or not self.server.policy_out)
                                     and all_acked(self.pub_policy, self.pub_env), p['stop_deadline_s'],
                                     lambda: self.server.ended_envs)
        self._stamp = None
        what = worker.model.describe() if hasattr(worker.model, 'describe') else p['policy']
        log.info(f"policy '{p['policy']}' ready (C={p['chunk']}, A={p['action_dim']}): {what}")

    # -- subscriptions: decode, call the server ---------------------------------------------------
    def on_request(self, m: M.PolicyInput) -> None:
        try:
            req = cv.policy_input_from_msg(m)
        except (ValueError, TypeError) as e:  # malformed request: counted, logged, node stays up
            self.server.counters['requests'] += 1
            return self.server.reject(e)
        self.server.request(req, m.header.frame_id)  # (the env node's name)

    def on_weights(self, m: M.PolicyWeights) -> None:
        data, path, sha = bytes(m.data), m.path, m.sha256
        self.server.weights(int(m.model_version), lambda: W.unpack(data, sha) if data else W.load_file(path, sha),
                            len(data) or path)

    def on_ack(self, m: M.KeyAck) -> None:
        self.server.ack([cv.key_from_msg(k) for k in m.keys])

    # -- the server's transport: encode, publish ------------------------------------------------
    def _chunk(self, chunk) -> M.ActionChunk:
        out = cv.action_chunk_to_msg(chunk)
        out.header.stamp = self._stamp = self.get_clock().now().to_msg()
        self.pub_action.publish(out)
        return out

    def _policy_part(self, part, version: int) -> M.PolicyPart:
        pm = cv.policy_part_to_msg(part, version)
        pm.header.stamp = self._stamp   # the chunk's: the part and its reply are one answer
        return pm

    def _env_part(self, part) -> M.EnvPart:
        em = cv.env_part_to_msg(part)
        em.header.stamp = self.get_clock().now().to_msg()
        return em

    def _consumers(self) -> int:
        """Collectors matched on both part topics (what the outboxes resend to)."""
        return min(self.pub_policy.get_subscription_count(), self.pub_env.get_subscription_count())

    def shutdown(self) -> None:
        wait_acked(self, (self.pub_action, self.pub_policy, self.pub_env))
        self.server.worker.close()
        counters = self.server.summary()
        unacked = counters.pop('unacked')
        self.get_logger().info(f'counters: {counters}, parts without a KeyAck: {unacked}')
        if unacked:  # the collector still held them (an episode or step not completed), or no collector had them
            keys = sorted(k.as_tuple() for k in self.server.policy_out.pending())[:20]
            self.get_logger().info(f"{unacked} chunks were not acknowledged as stored (see the collector's last "
                                   f'lines): {keys}')


def main(args=None) -> int:
    return run_node(PolicyNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
