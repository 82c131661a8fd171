"""replay_buffer_writer_node: stores every Trajectory message in a TrajectoryReplayBuffer.

Exactly once by TrajectoryId (delivery.sink.ExactlyOnceSink): a re-delivery is acknowledged
again, never stored twice; a new run into an existing directory appends. TrajectoryAcks go
out once file, index and directory entries are on disk. After a stop signal it keeps taking
trajectories until no collector publishes any (``delivery.stop``). Services: ``~/save_checkpoint``
(SaveCheckpoint) and ``~/get_stats`` (GetStats). On shutdown (SIGINT) the buffer is flushed
and closed, so everything received is on disk.
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

from rclpy.node import Node

from .. import msg as M
from .. import srv as S
from ..assembly import make_buffer
from ..delivery.sink import ExactlyOnceSink
from ..params.writer_node import WRITER_NODE
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS
from ..ros.run_link import RunLink
from .common import declare, diagnostics_publisher, run_node, serve_stats, stop_drain, topic


class ReplayBufferWriterNode(Node):
    def __init__(self):
        super().__init__('replay_buffer_writer_node')
        p = declare(self, WRITER_NODE)
        self.p, self.link = p, RunLink(self, p)
        self.buffer = make_buffer(p)
        self.sink = ExactlyOnceSink(self.buffer, p['dedupe_window'])
        self.counters = {'received': 0, 'decode_errors': 0, 'disk_stalls': 0}
        self.pub_ack = self.link.publisher(M.TrajectoryAck, topic(self, 'trajectory_ack'), DATA_QOS)
        self.create_timer(0.05, self._publish_acks)
        self.create_timer(0.5, self._watch_disk)
        self._sub = None
        self._subscribe()
        self.create_service(S.SaveCheckpoint, '~/save_checkpoint', self.on_save)
        serve_stats(self, self.durable_stats)
        diagnostics_publisher(self, p['diagnostics_period_s'], self.stats)
        # after a stop signal: take trajectories until no collector publishes any (delivery.stop)
        self.stop_drain = stop_drain(self, ('trajectory',), lambda: True, p['stop_deadline_s'])
        self.get_logger().info(f"writing trajectories to {p['output_dir']} ({len(self.buffer)} already there)")

    def on_trajectory(self, m: M.Trajectory) -> None:
        self.counters['received'] += 1
        try:
            traj = cv.trajectory_from_msg(m)
        except (ValueError, TypeError) as e:
            self.counters['decode_errors'] += 1
            self.get_logger().error(f'rejected Trajectory: {e}')
            return
        offer = self.sink.offer(traj)  # deferred (queue full): not acknowledged, so resent later
        if offer.verdict == 'rejected':
            self.get_logger().error(f'rejected Trajectory: {offer.reason}')

    def stats(self) -> dict:
        return {**self.counters, **self.sink.counters, 'trajectories': len(self.buffer),
                'remembered_ids': self.sink.remembered()}

    def _subscribe(self) -> None:
        self._sub = self.link.subscription(M.Trajectory, topic(self, 'trajectory'), self.on_trajectory, DATA_QOS)

    def _watch_disk(self) -> None:
        """Disk full: stop taking trajectories (upstream keeps them until acknowledged) and
        resume when the writer's retries succeed again; the node stays up throughout."""
        err = self.buffer.write_stalled
        if err is not None and self._sub is not None:
            self.counters['disk_stalls'] += 1
            self.get_logger().error(f"cannot write to {self.p['output_dir']}: {err}; pausing intake until "
                                    'the write succeeds (nothing is lost: producers keep unacknowledged data)')
            self.destroy_subscription(self._sub)
            self._sub = None
        elif err is None and self._sub is None:
            self.get_logger().info('writes succeed again: resuming intake')
            self._subscribe()

    def _publish_acks(self) -> None:
        ids = self.sink.take_acks()
        if ids:
            msg = M.TrajectoryAck(ids=[cv.identity_to_msg(i) for i in ids])
            msg.header.stamp = self.get_clock().now().to_msg()
            self.pub_ack.publish(msg)

    def on_save(self, request, response):
        try:
            self.buffer.save_checkpoint(request.save_path)
            response.success, response.message = True, f'saved to {request.save_path}'
            response.num_trajectories, response.total_samples = len(self.buffer), self.buffer.total_samples
        except Exception as e:  # noqa: BLE001 - report to the caller, keep running
            response.success, response.message = False, f'{type(e).__name__}: {e}'
        return response

    def durable_stats(self) -> dict:
        self.buffer.flush()  # counts below are durable
        return {**self.stats(), 'total_samples': self.buffer.total_samples}

    def shutdown(self) -> None:
        self.buffer.close()
        self._publish_acks()
        self.get_logger().info(f'closed buffer: {self.stats()}')


def main(args=None) -> int:
    return run_node(ReplayBufferWriterNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
