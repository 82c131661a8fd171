"""learner_node: PPO from the trajectory topic; new weights with their version back to the
policy node (the VLA PPO trainer document over ROS 2).

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

from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from .. import msg as M
from ..learning import weights as W
from ..learning.learner import LearnerConfig, Update, append_metrics, write_warm_start
from ..learning.ppo import PPOConfig, all_reduce_gradients
from ..storage.index import INDEX_FILE, read_stored_trajectories
from ..storage.files import BufferFileError
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS, WEIGHTS_QOS
from ..rollout.workers import make_learner
from .common import declare, run_node, serve_stats, topic, wait_acked


PPO, LC = PPOConfig(), LearnerConfig(0, 0)  # the defaults make_learner falls back to


class LearnerNode(Node):
    def __init__(self):
        super().__init__('learner_node')
        p = declare(self, {
            'state_dim': (21, 'length of obs/states (the policy node\'s model)'),
            'action_dim': (7, 'A: actions per control step'),
            'chunk': (4, 'C: control steps per action chunk'),
            'hidden': (128, 'hidden width of the actor-critic MLP'),
            'seed': (0, 'model init seed (the policy node\'s, so version 0 is the same model)'),
            'num_envs': (2, 'envs per env node'),
            'num_env_nodes': (1, 'env nodes: a step is trained once num_envs x num_env_nodes rows arrived'),
            'gamma': (LC.gamma, 'discount'),
            'gae_lambda': (LC.gae_lambda, 'GAE lambda'),
            'advantage': (LC.advantage, "'gae' or 'reinforce++'"),
            'auto_reset': (LC.auto_reset, 'the envs auto-reset (every slot is a step); '
                                          'false: mask after the first done'),
            'max_version_lag': (LC.max_version_lag, 'mask out rows rolled out by weights older than version - lag; '
                                                   '-1: keep all'),
            'lr': (PPO.lr, 'Adam learning rate'),
            'ppo_epochs': (PPO.epochs, 'epochs over each step\'s samples'),
            'minibatch_size': (PPO.minibatch_size, 'samples per gradient step'),
            'clip_ratio': (PPO.clip_ratio, 'PPO clip'),
            'value_clip': (PPO.value_clip, 'value clip (0 = off)'),
            'entropy_coef': (PPO.entropy_coef, 'entropy bonus'),
            'value_coef': (PPO.value_coef, 'value loss weight'),
            'max_grad_norm': (PPO.max_grad_norm, 'gradient clipping'),
            'target_kl': (PPO.target_kl, 'stop an update\'s epochs once approx KL > 1.5x this (0 = off)'),
            'normalize_advantages': (PPO.normalize_advantages, 'whiten the advantages of each update'),
            'critic_warmup': (PPO.critic_warmup, 'the first N updates train the critic only (a warm-started actor '
                                                 'waits for a critic that knows its returns)'),
            'inline_max_bytes': (8 << 20, 'weights up to this size travel in the message; larger as a file'),
            'weights_dir': ('', 'where larger weights are written (shared with the policy node)'),
            'metrics_dir': ('', 'metrics.jsonl goes here (empty: not written)'),
            'num_updates': (0, 'stop after this many updates (0 = run until stopped)'),
            'checkpoint_dir': ('', 'learner_checkpoint.pt (model, optimizer, version, trained steps) goes here'),
            'checkpoint_every': (1, 'save every this many updates (0 = only at shutdown)'),
            'resume': (True, 'continue from checkpoint_dir\'s checkpoint when there is one'),
            'tensorboard_dir': ('', 'TensorBoard event files (SummaryWriter) go here (empty: none)'),
            'snapshot_every': (0, 'also keep the weights of every N-th version as weights_dir/policy_v<N>.pt '
                                  '(learning curves against held-out evaluation; 0 = off)'),
            'warm_start_dataset': ('', 'behaviour-clone the actor on the LeRobot datasets under this directory before '
                                       'the first update (a fresh learner only); the clone goes out as version 1'),
            'warm_start_epochs': (100, 'epochs of behaviour cloning'),
            'num_epochs': (1, 'E: epochs per step (with chunks_per_epoch: the chunks a step\'s rows hold)'),
            'chunks_per_epoch': (1, 'L: chunks per epoch'),
            'run_id': ('', "train only on this run's trajectories (empty: any run's)"),
            'replay_buffer_dir': ('', "the writer's buffer: catch up there on steps missed while down"),
            'catch_up_period_s': (2.0, 'how often to look for stored trajectories of missed steps'),
            'num_actors': (1, 'learner ranks (the collector in pipeline mode with the same num_actors)'),
            'actor_rank': (0, 'this learner\'s rank (with num_actors > 1)'),
            'dist_backend': ('gloo', "torch.distributed backend: 'gloo' (CPU) or 'nccl' (GPU)"),
            'dist_init': ('tcp://127.0.0.1:29517', 'torch.distributed rendezvous of the ranks'),
        })
        ranks = p['num_actors']
        self.learner = make_learner(p, all_reduce_gradients if ranks > 1 else None)  # checks the ranks first
        if ranks > 1:
            import torch.distributed as dist
            self.get_logger().info(f"rank {p['actor_rank']} of {ranks}: joining {p['dist_init']} ({p['dist_backend']})")
            dist.init_process_group(p['dist_backend'], init_method=p['dist_init'], rank=p['actor_rank'],
                                    world_size=ranks)
        cfg = self.learner.cfg
        self.rank0 = p['actor_rank'] == 0
        if ranks > 1:  # each rank its own checkpoint and event files; rank 0's metrics keep the plain name
            for k in ('checkpoint_dir', 'tensorboard_dir'):
                if p[k]:
                    p[k] = str(Path(p[k]) / f"rank_{p['actor_rank']}")
        self.metrics_file = 'metrics.jsonl' if self.rank0 else f"metrics_rank{p['actor_rank']}.jsonl"
        self.p = p
        if p['checkpoint_dir'] and p['resume'] and self.learner.load_checkpoint(p['checkpoint_dir']):
            self.get_logger().info(f"resumed from {p['checkpoint_dir']}: version {self.learner.version}")
        self.pub_weights = self.create_publisher(M.PolicyWeights, topic(self, 'policy_weights'), WEIGHTS_QOS)
        self.pub_metrics = self.create_publisher(DiagnosticArray, topic(self, 'learner_metrics'), 10)
        self.create_subscription(M.Trajectory, topic(self, 'trajectory'), self.on_trajectory, DATA_QOS)
        serve_stats(self, self.stats)
        self.rejected = self.caught_up = 0
        self._index_mtime = None
        self.last_metrics: dict[str, float] = {}
        self.tb = None
        if p['tensorboard_dir']:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(p['tensorboard_dir'])
        self.finished = False
        if p['warm_start_dataset'] and self.learner.version == 0 and not self.learner.counters['updates']:
            up = self.learner.warm_start_from(p['warm_start_dataset'], p['warm_start_epochs'])  # same on every rank
            if p['checkpoint_dir']:
                self.learner.save_checkpoint(p['checkpoint_dir'])
            if self.rank0 and p['metrics_dir']:
                write_warm_start(p['metrics_dir'], up)
            if self.rank0 and p['snapshot_every'] and p['weights_dir']:
                W.save_file(up.state_dict, p['weights_dir'], up.version)
            self.get_logger().info(f"warm start from {p['warm_start_dataset']}: v{up.version}, " + ', '.join(
                f'{k} {v:.4g}' for k, v in up.metrics.items()))
        # announce itself: the policy node (max_version_lag >= 0) answers nothing before the learner is
        # subscribed, and a resumed (or warm-started) learner's version reaches it at once (TRANSIENT_LOCAL)
        if self.rank0:
            self._publish_weights(self.learner.model.state_dict(), self.learner.version)
        self.get_logger().info(f"learner ready: {cfg.rows_per_step} rows per step, advantage {p['advantage']}, "
                               f'version {self.learner.version}')
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
            up = self.learner.offer(traj)
        except ValueError as e:  # a trajectory it cannot train on: counted, reported, the node stays up
            self.rejected += 1
            self.get_logger().error(f'cannot train on {traj.identity}: {e}')
            return
        if up is None:
            return
        every = self.p['checkpoint_every']
        if self.p['checkpoint_dir'] and every and self.learner.counters['updates'] % every == 0:
            self.learner.save_checkpoint(self.p['checkpoint_dir'])  # before the weights leave: resumable
        if self.rank0:
            self._publish_weights(up.state_dict, up.version)
            every = self.p['snapshot_every']
            if every and self.p['weights_dir'] and up.version % every == 0:
                W.save_file(up.state_dict, self.p['weights_dir'], up.version)
        self.last_metrics = up.metrics
        self._publish_metrics(up)
        mt = up.metrics
        self.get_logger().info(
            f"update {self.learner.counters['updates']} (step {up.step_id}) -> v{up.version}: "
            f"success {mt.get('success_rate', 0):.0%} of {mt.get('episodes', 0):.0f} episodes, "
            f"reward/step {mt.get('reward_per_step', 0):.3f}, policy loss {mt.get('policy_loss', 0):.4f}, "
            f"value loss {mt.get('value_loss', 0):.4f}, entropy {mt.get('entropy', 0):.3f}, "
            f"kl {mt.get('approx_kl', 0):.4f}, clip {mt.get('clip_fraction', 0):.2f}, "
            f"ev {mt.get('explained_variance', 0):.2f}, {mt.get('samples_per_s', 0):.0f} samples/s, "
            f"lag {mt.get('version_lag_max', 0):.0f}")
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
        if self.tb is not None:
            for k, v in metrics.items():
                self.tb.add_scalar(f'learner/{k}', v, step)
            self.tb.flush()
        if self.p['metrics_dir']:
            append_metrics(Path(self.p['metrics_dir']) / self.metrics_file, up)

    def stats(self) -> dict[str, float]:
        return {**{k: float(v) for k, v in self.learner.counters.items()}, 'version': float(self.learner.version),
                'rejected': float(self.rejected), 'caught_up': float(self.caught_up),
                **{f'last_{k}': v for k, v in self.last_metrics.items()}}

    def shutdown(self) -> None:
        if self.p['checkpoint_dir'] and self.learner.counters['updates']:
            self.learner.save_checkpoint(self.p['checkpoint_dir'])
        if self.tb is not None:
            self.tb.close()
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
