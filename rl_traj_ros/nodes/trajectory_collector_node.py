"""trajectory_collector_node: TrajectoryCollector on the PolicyPart/EnvPart topics.

Publishes a Trajectory per source and step (rollout, one per shard), per-actor micro-batches
(pipeline) or finished episodes (lerobot, as [n, 1, ...] Trajectory messages), each with the
TrajectoryId that names its rows. Keeps each until the writer's TrajectoryAck, and
acknowledges upstream (KeyAck) the chunk keys whose every row is stored (delivery.ledger).
Malformed or duplicate parts are counted and logged, never crash the node; parts whose other
half never comes are dropped and reported after ``pending_timeout_s``. Counters: GetStats
service and a log line. Only its run's parts and acks are taken (``ros.run_link``).
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

from rclpy.node import Node

from .. import msg as M
from ..collect.collector import TrajectoryCollector
from ..collect.joiner import DuplicateChunkError
from ..data.identity import new_run_id
from ..data.schema import MalformedPartError
from ..delivery.outbox import Outbox
from ..params.collector_node import COLLECTOR_NODE
from ..assembly import make_plan
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS
from ..ros.run_link import RunLink
from .common import declare, diagnostics_publisher, run_node, serve_stats, stop_drain, topic, wait_acked


class TrajectoryCollectorNode(Node):
    def __init__(self):
        super().__init__('trajectory_collector_node')
        p = declare(self, COLLECTOR_NODE)
        self.link = RunLink(self, p)  # its messages: the run_id's (before an empty one is replaced below)
        if not p['run_id']:
            p = p.replace(run_id=new_run_id())
            self.get_logger().warning(f"run_id not set: using {p['run_id']!r}; set it explicitly so that a restarted "
                                      'collector rebuilds the same identities (exactly once across restarts)')
        self.plan, self.p = make_plan(p), p
        self.collector = TrajectoryCollector(self.plan, p['run_id'])
        self.counters = {'published': 0, 'rejected': 0, 'duplicates': 0, 'expired': 0, 'decode_errors': 0,
                         'keys_acked': 0}
        self.pub = self.link.publisher(M.Trajectory, topic(self, 'trajectory'), DATA_QOS)
        self.outbox = Outbox(self.pub.publish, p['resend_after_s'])
        self.pub_ack = self.link.publisher(M.KeyAck, topic(self, 'key_ack'), DATA_QOS)
        self.link.subscription(M.TrajectoryAck, topic(self, 'trajectory_ack'), self.on_ack, DATA_QOS)
        self.create_timer(1.0, lambda: self.outbox.tick(self.pub.get_subscription_count()))
        self.link.subscription(M.PolicyPart, topic(self, 'policy_part'),
                               lambda m: self.on_part(m, cv.policy_part_from_msg), DATA_QOS)
        self.link.subscription(M.EnvPart, topic(self, 'env_part'),
                               lambda m: self.on_part(m, cv.env_part_from_msg), DATA_QOS)
        serve_stats(self, self.stats)
        # after a stop signal: until no policy node publishes parts and the writer acknowledged what was flushed
        self.stop_drain = stop_drain(self, ('policy_part', 'env_part'), lambda: not self.outbox or
                                     not self.pub.get_subscription_count(), p['stop_deadline_s'])
        self.create_timer(5.0, self.expire)
        diagnostics_publisher(self, p['diagnostics_period_s'], self.stats)
        if p['stats_period_s'] > 0:
            self.create_timer(p['stats_period_s'], lambda: self.get_logger().info(f'counters: {self.stats()}'))

    def on_part(self, m, decode) -> None:
        try:
            part = decode(m)
        except (ValueError, TypeError) as e:
            self.counters['decode_errors'] += 1
            self.get_logger().error(f'rejected {type(m).__name__}: {e}')
            return
        try:
            outputs = self.collector.push(part)
        except DuplicateChunkError:
            self.counters['duplicates'] += 1  # a resend of a chunk already built: harmless
            self._ack_upstream()  # (acknowledged again if its rows are all stored)
            return
        except MalformedPartError as e:
            self.counters['rejected'] += 1
            self.get_logger().error(f'rejected {type(m).__name__}: {e}')
            outputs = self.collector.take_outputs_after_error()
        except Exception as e:  # noqa: BLE001 - build failure: halves kept, retried on re-delivery
            self.get_logger().error(f'building a chunk failed (kept for retry): {e!r}')
            outputs = self.collector.take_outputs_after_error()
        self._publish(outputs)

    def _publish(self, outputs) -> None:
        for o in outputs:
            msg = cv.trajectory_to_msg(o.trajectory)
            msg.header.stamp = self.get_clock().now().to_msg()
            self.outbox.send(o.identity, [o.identity], msg, matched=self.pub.get_subscription_count())
            self.counters['published'] += 1
        self._ack_upstream()

    def _ack_upstream(self) -> None:
        keys = self.collector.take_settled()
        if keys:
            ack = M.KeyAck(keys=[cv.key_to_msg(k) for k in keys])
            ack.header.stamp = self.get_clock().now().to_msg()
            self.pub_ack.publish(ack)
            self.counters['keys_acked'] += len(keys)

    def on_ack(self, m: M.TrajectoryAck) -> None:
        try:
            ids = [cv.identity_from_msg(i, 'TrajectoryAck.ids') for i in m.ids]
        except ValueError as e:
            self.counters['decode_errors'] += 1
            self.get_logger().error(f'rejected TrajectoryAck: {e}')
            return
        ids = [i for i in ids if i is not None and i.run_id == self.collector.run_id]
        self.outbox.ack(ids)
        self.collector.acknowledge(ids)
        self._ack_upstream()

    def expire(self) -> None:
        for key in self.collector.expire(self.p['pending_timeout_s']):
            self.counters['expired'] += 1
            self.get_logger().warning(f'dropped {key.as_tuple()}: its other half never arrived')

    def stats(self) -> dict:
        s = {**self.collector.stats, **self.counters, 'pending_keys': len(self.collector.joiner),
             'unacked': len(self.outbox)}
        s['unsettled_keys'] = self.collector.ledger.unsettled()
        s['completed_keys_held'] = self.collector.joiner.completed_keys_held()
        s['resent'] = self.outbox.resent
        s['writers'] = self.pub.get_subscription_count()  # matched: 0 while discovery has not paired them
        return s

    def shutdown(self) -> None:
        if self.outbox:  # else the writer acknowledged every trajectory: stored, nothing to wait for
            wait_acked(self, (self.pub,))
        st = self.stats()
        self.get_logger().info(f'final counters: {st}')
        if self.outbox:  # the writer is gone (or did not answer in time): say what it did not store
            self.get_logger().error(f'{len(self.outbox)} trajectories flushed but not acknowledged as stored: '
                                    f'{sorted(str(i) for i in self.outbox.pending())[:20]} (not written anywhere; '
                                    'their chunks were not acknowledged to the policy node either)')
        open_keys = self.collector.ledger.unsettled_keys()  # joined, not stored: an open step or episode
        if open_keys:  # not a loss: what the mode holds until an episode (or step) completes
            self.get_logger().info(f'{len(open_keys)} chunk keys were not stored because their episode or step was '
                                   f"still open when the run ended (mode {self.p['mode']} stores completed ones "
                                   f'only): {sorted(k.as_tuple() for k in open_keys)[:20]}')


def main(args=None) -> int:
    return run_node(TrajectoryCollectorNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
