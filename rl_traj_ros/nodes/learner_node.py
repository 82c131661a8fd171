"""learner_node: PPO or RLPD from the trajectory topic; new weights with their version back to
the policy node (the VLA PPO trainer document over ROS 2; ``algorithm``).

PPO trains one update per training step once all of the step's env rows arrived; RLPD
(``learning/rlpd_learner.py``) keeps its own online and demonstration buffers and runs gradient
steps between messages (``train_slice`` at a time) within its ``utd_ratio`` budget. Weights go
out inline or as a file under ``weights_dir``, metrics on ``learner_metrics``, ``~/get_stats``,
metrics.jsonl and TensorBoard (``learning.loop.LearnerLoop``: checkpoints, resume, warm start,
snapshots); with ``replay_buffer_dir`` it catches up on what the writer stored while it was down
(``learning.catch_up``); ``num_actors`` > 1 ranks all-reduce their gradients (rank 0 publishes).
docs/nodes.md and docs/learning.md have the details.
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from .. import msg as M
from ..assembly import join_learner_ranks, leave_learner_ranks, make_learner
from ..learning import weights as W
from ..learning.base import Update
from ..learning.catch_up import StoredCatchUp
from ..learning.loop import LearnerLoop, RunFiles, summary
from ..learning.ppo import all_reduce_gradients
from ..params.learner_node import LEARNER_NODE
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS, WEIGHTS_QOS
from ..ros.run_link import RunLink
from .common import declare, hardware_id, run_node, serve_stats, topic, wait_acked


class LearnerNode(Node):
    def __init__(self):
        super().__init__('learner_node')
        p = self.p = declare(self, LEARNER_NODE)
        self.link = RunLink(self, p)
        learner = self.learner = make_learner(p, all_reduce_gradients if p['num_actors'] > 1 else None)
        join_learner_ranks(p, self.get_logger().info)
        self.rank0 = p['actor_rank'] == 0
        self.loop = LearnerLoop(learner, RunFiles.of_rank(p), self.get_logger().info)
        self.pub_weights = self.link.publisher(M.PolicyWeights, topic(self, 'policy_weights'), WEIGHTS_QOS)
        self.pub_metrics = self.create_publisher(DiagnosticArray, topic(self, 'learner_metrics'), 10)
        self.link.subscription(M.Trajectory, topic(self, 'trajectory'), self.on_trajectory, DATA_QOS)
        serve_stats(self, self.stats)
        self.rejected = self.caught_up = 0
        self.last_metrics: dict[str, float] = {}
        self.finished = False
        self.loop.start(p['resume'], p['warm_start_dataset'], p['warm_start_epochs'])
        # announce itself: the policy node (max_version_lag >= 0) answers nothing before the learner is
        # subscribed, and a resumed (or warm-started) learner's version reaches it at once (TRANSIENT_LOCAL)
        if self.rank0:
            self._publish_weights(learner.model.state_dict(), learner.version)
        if p['algorithm'] == 'rlpd':  # off-policy: gradient steps between messages, as the data allows
            self.create_timer(0.005, self._train)
            self.get_logger().info(f"learner ready: rlpd, {len(learner.demos)} demonstration trajectories "
                                   f"({learner.demos.total_samples} rows), version {learner.version}")
        else:
            self.get_logger().info(f"learner ready: ppo, {learner.cfg.rows_per_step} rows per step, advantage "
                                   f"{p['advantage']}, version {learner.version}")
        self.stored = StoredCatchUp(p['replay_buffer_dir'], learner.wants) if p['replay_buffer_dir'] else None
        if self.stored is not None:
            self.catch_up()
            self.create_timer(p['catch_up_period_s'], self.catch_up)

    def on_trajectory(self, m: M.Trajectory) -> None:
        try:
            traj = cv.trajectory_from_msg(m)
        except (ValueError, TypeError) as e:
            self.rejected += 1
            self.get_logger().error(f'rejected Trajectory: {e}')
            return
        self._take(traj)

    def catch_up(self) -> None:
        """Train on what the writer stored of steps this learner never received (it was down)."""
        if self.finished:
            return
        for traj in self.stored.poll():
            if self.learner.wants(traj.identity):
                self.caught_up += 1
                self.get_logger().info(f'catching up from the replay buffer: {traj.identity}')
                self._take(traj)
        if self.stored.last_error:
            self.get_logger().warning(self.stored.last_error)

    def _take(self, traj) -> None:
        if self.finished:
            return
        try:
            up = self.loop.offer(traj)  # checkpointed (when due) before the weights leave
        except ValueError as e:  # a trajectory it cannot train on: counted, reported, the node stays up
            self.rejected += 1
            self.get_logger().error(f'cannot train on {traj.identity}: {e}')
            return
        self._updated(up)

    def _train(self) -> None:
        if not self.finished:
            self._updated(self.loop.train(self.p['train_slice']))

    def _updated(self, up) -> None:
        if up is None:
            return
        if self.rank0:
            self._publish_weights(up.state_dict, up.version)
        self.last_metrics = up.metrics
        self._publish_metrics(up)
        self.get_logger().info(f"update {self.learner.counters['updates']} (step {up.step_id}) -> v{up.version}: "
                               f'{summary(up.metrics)}')
        if self.p['num_updates'] and self.learner.counters['updates'] >= self.p['num_updates']:
            self.finished = True

    def _publish_weights(self, state_dict: dict, version: int) -> None:
        data, path, digest = W.outgoing(state_dict, version, self.p['inline_max_bytes'], self.p['weights_dir'])
        m = M.PolicyWeights(model_version=version, sha256=digest, path=path)
        m.data = data
        m.header.stamp = self.get_clock().now().to_msg()
        self.pub_weights.publish(m)

    def _publish_metrics(self, up: Update) -> None:
        status = DiagnosticStatus(name=self.get_fully_qualified_name(), hardware_id=hardware_id(self),
                                  message=f'step {up.step_id}',
                                  values=[KeyValue(key=k, value=f'{v:.6g}') for k, v in up.metrics.items()])
        arr = DiagnosticArray(status=[status])
        arr.header.stamp = self.get_clock().now().to_msg()
        self.pub_metrics.publish(arr)

    def stats(self) -> dict[str, float]:
        return {**{k: float(v) for k, v in self.learner.counters.items()}, 'version': float(self.learner.version),
                'rejected': float(self.rejected), 'caught_up': float(self.caught_up),
                **{f'last_{k}': v for k, v in self.last_metrics.items()}}

    def shutdown(self) -> None:
        self.loop.close()
        wait_acked(self, (self.pub_weights,), timeout_s=5.0)
        leave_learner_ranks()
        self.get_logger().info(f'counters: {self.learner.counters}, version {self.learner.version}')


def main(args=None) -> int:
    return run_node(LearnerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
