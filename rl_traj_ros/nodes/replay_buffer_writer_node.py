"""replay_buffer_writer_node: stores every Trajectory message in a TrajectoryReplayBuffer.

Services: ``~/save_checkpoint`` (SaveCheckpoint) and ``~/get_stats`` (GetStats). On shutdown
(SIGINT) the buffer is flushed and closed, so everything received is on disk.
"""
from __future__ import annotations

import threading
import time

from rclpy.node import Node

from .. import msg as M
from .. import srv as S
from ..core.replay_buffer import BufferFull, TrajectoryReplayBuffer
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS
from .common import declare, diagnostics_publisher, run_node, topic


class ReplayBufferWriterNode(Node):
    def __init__(self):
        super().__init__('replay_buffer_writer_node')
        p = declare(self, {
            'output_dir': ('outputs/replay_buffer', 'auto-save directory (appends if it exists)'),
            'trajectory_format': ('pt', "'pt' (safe loading) or 'pkl' (trusted data only)"),
            'cache_size': (5, 'FIFO cache of recent trajectories'),
            'sample_window_size': (100, 'sampling window (0 = all)'),
            'seed': (1234, 'sampling seed'),
            'max_pending_writes': (4, 'writer queue bound (backpressure)'),
            'diagnostics_period_s': (1.0, 'period of the /diagnostics counters'),
            'throttle_writes_s': (0.0, 'fault injection: sleep before each write (emulates a slow disk)'),
        })
        self.p = p
        self._durable: list[int] = []
        self._lock = threading.Lock()
        self.buffer = TrajectoryReplayBuffer(seed=p['seed'], cache_size=p['cache_size'],
                                             sample_window_size=p['sample_window_size'], auto_save=True,
                                             auto_save_path=p['output_dir'], trajectory_format=p['trajectory_format'],
                                             max_pending_writes=p['max_pending_writes'], on_durable=self._on_durable,
                                             before_write=self._throttle if p['throttle_writes_s'] > 0 else None)
        # exactly once: keys already stored (persisted in the index) are never stored again
        self.stored_keys = self.buffer.stored_keys()
        self._keys_of: dict[int, list] = {}
        self._ack_backlog: list = []
        self.counters = {'received': 0, 'stored': 0, 'rejected': 0, 'duplicates': 0, 'acked': 0, 'deferred': 0,
                         'disk_stalls': 0}
        self.pub_ack = self.create_publisher(M.KeyAck, topic(self, 'key_ack'), DATA_QOS)
        self.create_timer(0.05, self._publish_acks)
        self.create_timer(0.5, self._watch_disk)
        self._sub = None
        self._subscribe()
        self.create_service(S.SaveCheckpoint, '~/save_checkpoint', self.on_save)
        self.create_service(S.GetStats, '~/get_stats', self.on_stats)
        diagnostics_publisher(self, p['diagnostics_period_s'],
                              lambda: {**self.counters, 'trajectories': len(self.buffer)})
        self.get_logger().info(f"writing trajectories to {p['output_dir']} ({len(self.buffer)} already there)")

    def on_trajectory(self, m: M.Trajectory) -> None:
        self.counters['received'] += 1
        try:
            traj = cv.trajectory_from_msg(m)
        except (ValueError, TypeError) as e:
            self.counters['rejected'] += 1
            self.get_logger().error(f'rejected Trajectory: {e}')
            return
        keys = [k.as_tuple() for k in traj.keys]
        if keys and all(k in self.stored_keys for k in keys):
            self.counters['duplicates'] += 1  # a resend: stored already; acknowledge again
            with self._lock:
                self._ack_backlog.extend(keys)
            return
        if any(k in self.stored_keys for k in keys):
            self.counters['rejected'] += 1
            self.get_logger().error(f'rejected Trajectory overlapping stored keys: {keys}')
            return
        try:
            with self._lock:
                tid = self.buffer.add_trajectories([traj], block=False)[0]
                self._keys_of[tid] = keys
        except BufferFull:
            # not acknowledged, so the collector still holds it and resends it later
            self.counters['deferred'] += 1
            return
        self.stored_keys.update(keys)
        self.counters['stored'] += 1

    def _subscribe(self) -> None:
        self._sub = self.create_subscription(M.Trajectory, topic(self, 'trajectory'), self.on_trajectory, DATA_QOS)

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

    def _throttle(self, tid: int) -> None:
        time.sleep(self.p['throttle_writes_s'])

    def _on_durable(self, tid: int) -> None:  # writer thread
        with self._lock:
            self._ack_backlog.extend(self._keys_of.pop(tid, []))

    def _publish_acks(self) -> None:
        with self._lock:
            keys, self._ack_backlog = self._ack_backlog, []
        if not keys:
            return
        from ..core.schema import TrajectoryKey
        msg = M.KeyAck(keys=[cv.key_to_msg(TrajectoryKey(*k)) for k in keys])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.pub_ack.publish(msg)
        self.counters['acked'] += len(keys)

    def on_save(self, request, response):
        try:
            self.buffer.save_checkpoint(request.save_path)
            response.success, response.message = True, f'saved to {request.save_path}'
            response.num_trajectories, response.total_samples = len(self.buffer), self.buffer.total_samples
        except Exception as e:  # noqa: BLE001 - report to the caller, keep running
            response.success, response.message = False, f'{type(e).__name__}: {e}'
        return response

    def on_stats(self, request, response):
        self.buffer.flush()  # counts below are durable
        s = {**self.counters, 'trajectories': len(self.buffer), 'total_samples': self.buffer.total_samples}
        response.names = list(s)
        response.values = [float(v) for v in s.values()]
        return response

    def shutdown(self) -> None:
        self.buffer.close()
        self._publish_acks()
        self.get_logger().info(f'closed buffer: {self.counters}, {len(self.buffer)} trajectories')


def main(args=None) -> int:
    return run_node(ReplayBufferWriterNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
