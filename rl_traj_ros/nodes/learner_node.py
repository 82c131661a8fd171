"""learner_node: PPO or RLPD from the trajectory topic; new weights with their version back to
the policy node (the VLA PPO trainer document over ROS 2; ``algorithm``).

RLPD (``algorithm: rlpd``, ``learning/rlpd_learner.py``): every trajectory goes into the learner's
own online buffer, the demonstrations of ``demos_dir`` into its demo buffer (intervened rows
too), and gradient steps run between messages (``train_slice`` at a time) within the
``utd_ratio`` budget; the actor's weights go out every ``publish_every`` steps or
``publish_period_s`` seconds. PPO is described below.

Subscribes to the collector's Trajectory stream (as the writer does; the learner consumes
each trajectory identity once), trains one update per training step once all of the step's
env rows arrived (``core/learner.py``), publishes PolicyWeights (inline, or as a file under
``weights_dir`` above ``inline_max_bytes``) and the update's metrics on ``learner_metrics``
(DiagnosticArray) and ``~/get_stats``, logs a progress line per update, appends the metrics to
``<metrics_dir>/metrics.jsonl`` and to TensorBoard event files under ``tensorboard_dir``,
checkpoints itself under ``checkpoint_dir`` (resumed on start: the versions continue, trained
steps are not trained again), and stops after ``num_updates`` updates (0 = never).

Losing no step: with ``replay_buffer_dir`` (the writer's directory) the learner reads the
trajectories of untrained steps it never received from the writer's buffer, on start and
whenever the index changed (every ``catch_up_period_s``): a learner SIGKILLed mid-run and
restarted resumes from its checkpoint and trains the steps it missed while it was down.

Several learners: ``num_actors`` > 1 learner nodes, ``actor_rank`` 0..n-1, each take the
pipeline rows the collector routes to their actor rank and all-reduce gradients with
torch.distributed (``dist_backend`` gloo on CPU, nccl on GPUs; rendezvous at ``dist_init``);
every rank ends each update with the same weights and rank 0 publishes them.
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from .. import msg as M
from ..learning import weights as W
from ..learning.base import Update
from ..learning.loop import LearnerLoop, RunFiles, summary
from ..learning.ppo import all_reduce_gradients
from ..params.learner_node import LEARNER_NODE
from ..assembly import make_learner
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS, WEIGHTS_QOS
from ..storage.files import BufferFileError
from ..storage.index import INDEX_FILE, read_stored_trajectories
from .common import declare, run_node, serve_stats, topic, wait_acked


class LearnerNode(Node):
    def __init__(self):
        super().__init__('learner_node')
        p = declare(self, LEARNER_NODE)
        ranks = p['num_actors']
        learner = make_learner(p, all_reduce_gradients if ranks > 1 else None)  # checks the ranks first
        if ranks > 1:
            import torch.distributed as dist
            self.get_logger().info(f"rank {p['actor_rank']} of {ranks}: joining {p['dist_init']} ({p['dist_backend']})")
            dist.init_process_group(p['dist_backend'], init_method=p['dist_init'], rank=p['actor_rank'],
                                    world_size=ranks)
        self.p, self.rank0 = p, p['actor_rank'] == 0
        self.loop = LearnerLoop(learner, RunFiles.of_rank(p), self.get_logger().info)
        self.learner = learner
        self.pub_weights = self.create_publisher(M.PolicyWeights, topic(self, 'policy_weights'), WEIGHTS_QOS)
        self.pub_metrics = self.create_publisher(DiagnosticArray, topic(self, 'learner_metrics'), 10)
        self.create_subscription(M.Trajectory, topic(self, 'trajectory'), self.on_trajectory, DATA_QOS)
        serve_stats(self, self.stats)
        self.rejected = self.caught_up = 0
        self._index_mtime = None
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
        if p['replay_buffer_dir']:
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
        directory = Path(self.p['replay_buffer_dir'])
        try:
            mtime = (directory / INDEX_FILE).stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._index_mtime:
            return
        try:
            missed = read_stored_trajectories(directory, self.learner.wants)
        except (BufferFileError, OSError, ValueError) as e:  # e.g. the writer is mid-way through its first write
            self.get_logger().warning(f'cannot read {directory} yet: {e}')
            return
        self._index_mtime = mtime
        for traj in missed:
            if self.learner.wants(traj.identity):
                self.caught_up += 1
                self.get_logger().info(f'catching up from the replay buffer: {traj.identity}')
                self._take(traj)

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
        data, digest = W.pack(state_dict)
        m = M.PolicyWeights(model_version=version, sha256=digest)
        if len(data) <= self.p['inline_max_bytes'] or not self.p['weights_dir']:
            m.data = data
        else:
            m.path = str(W.write_file(data, self.p['weights_dir'], version))
        m.header.stamp = self.get_clock().now().to_msg()
        self.pub_weights.publish(m)

    def _publish_metrics(self, up: Update) -> None:
        step, metrics = up.step_id, up.metrics
        status = DiagnosticStatus(name=self.get_fully_qualified_name(), hardware_id='rl_traj_ros',
                                  message=f'step {step}',
                                  values=[KeyValue(key=k, value=f'{v:.6g}') for k, v in metrics.items()])
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
        if self.p['num_actors'] > 1:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
        self.get_logger().info(f'counters: {self.learner.counters}, version {self.learner.version}')


def main(args=None) -> int:
    return run_node(LearnerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
