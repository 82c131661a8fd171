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
"""
from __future__ import annotations

import json
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from .. import msg as M
from ..core import weights as W
from ..core.learner import Learner, LearnerConfig
from ..core.ppo import PPOConfig
from ..policies.actor_critic import ActorCritic
from ..ros import conversion as cv
from ..ros.qos import DATA_QOS, WEIGHTS_QOS
from .common import declare, run_node, serve_stats, topic, wait_acked


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
            'gamma': (0.99, 'discount'),
            'gae_lambda': (0.95, 'GAE lambda'),
            'advantage': ('gae', "'gae' or 'reinforce++'"),
            'auto_reset': (True, 'the envs auto-reset (every slot is a step); false: mask after the first done'),
            'max_version_lag': (-1, 'drop rows rolled out by weights older than version - lag; -1: keep all'),
            'lr': (3e-4, 'Adam learning rate'),
            'ppo_epochs': (4, 'epochs over each step\'s samples'),
            'minibatch_size': (64, 'samples per gradient step'),
            'clip_ratio': (0.2, 'PPO clip'),
            'value_clip': (0.2, 'value clip (0 = off)'),
            'entropy_coef': (0.0, 'entropy bonus'),
            'value_coef': (0.5, 'value loss weight'),
            'max_grad_norm': (0.5, 'gradient clipping'),
            'target_kl': (0.0, 'stop an update\'s epochs once approx KL > 1.5x this (0 = off)'),
            'inline_max_bytes': (8 << 20, 'weights up to this size travel in the message; larger as a file'),
            'weights_dir': ('', 'where larger weights are written (shared with the policy node)'),
            'metrics_dir': ('', 'metrics.jsonl goes here (empty: not written)'),
            'num_updates': (0, 'stop after this many updates (0 = run until stopped)'),
            'checkpoint_dir': ('', 'learner_checkpoint.pt (model, optimizer, version, trained steps) goes here'),
            'checkpoint_every': (1, 'save every this many updates (0 = only at shutdown)'),
            'resume': (True, 'continue from checkpoint_dir\'s checkpoint when there is one'),
            'tensorboard_dir': ('', 'TensorBoard event files (SummaryWriter) go here (empty: none)'),
        })
        model = ActorCritic(p['state_dim'], p['action_dim'], p['chunk'], p['hidden'], seed=p['seed'])
        ppo = PPOConfig(clip_ratio=p['clip_ratio'], value_clip=p['value_clip'], entropy_coef=p['entropy_coef'],
                        value_coef=p['value_coef'], epochs=p['ppo_epochs'], minibatch_size=p['minibatch_size'],
                        max_grad_norm=p['max_grad_norm'], target_kl=p['target_kl'], lr=p['lr'])
        cfg = LearnerConfig(p['num_envs'] * p['num_env_nodes'], p['action_dim'], p['gamma'], p['gae_lambda'],
                            p['advantage'], p['auto_reset'], p['max_version_lag'])
        self.p, self.learner = p, Learner(model, ppo, cfg, seed=p['seed'])
        if p['checkpoint_dir'] and p['resume'] and self.learner.load_checkpoint(p['checkpoint_dir']):
            self.get_logger().info(f"resumed from {p['checkpoint_dir']}: version {self.learner.version}")
        self.pub_weights = self.create_publisher(M.PolicyWeights, topic(self, 'policy_weights'), WEIGHTS_QOS)
        self.pub_metrics = self.create_publisher(DiagnosticArray, topic(self, 'learner_metrics'), 10)
        self.create_subscription(M.Trajectory, topic(self, 'trajectory'), self.on_trajectory, DATA_QOS)
        serve_stats(self, self.stats)
        self.rejected = 0
        self.last_metrics: dict[str, float] = {}
        self.tb = None
        if p['tensorboard_dir']:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(p['tensorboard_dir'])
        self.finished = False
        # announce itself: the policy node (max_version_lag >= 0) answers nothing before the learner is
        # subscribed, and a resumed learner's version reaches it at once (TRANSIENT_LOCAL)
        self._publish_weights(self.learner.model.state_dict(), self.learner.version)
        self.get_logger().info(f"learner ready: {cfg.rows_per_step} rows per step, advantage {p['advantage']}, "
                               f'version {self.learner.version}')

    def on_trajectory(self, m: M.Trajectory) -> None:
        try:
            traj = cv.trajectory_from_msg(m)
        except (ValueError, TypeError) as e:
            self.rejected += 1
            self.get_logger().error(f'rejected Trajectory: {e}')
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
        self._publish_weights(up.state_dict, up.version)
        self.last_metrics = up.metrics
        self._publish_metrics(up.step_id, up.metrics)
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

    def _publish_metrics(self, step: int, metrics: dict[str, float]) -> None:
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
            path = Path(self.p['metrics_dir']) / 'metrics.jsonl'
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, 'a') as fh:
                fh.write(json.dumps({'step': step, **metrics}) + '\n')

    def stats(self) -> dict[str, float]:
        return {**{k: float(v) for k, v in self.learner.counters.items()}, 'version': float(self.learner.version),
                'rejected': float(self.rejected), **{f'last_{k}': v for k, v in self.last_metrics.items()}}

    def shutdown(self) -> None:
        if self.p['checkpoint_dir'] and self.learner.counters['updates']:
            self.learner.save_checkpoint(self.p['checkpoint_dir'])
        if self.tb is not None:
            self.tb.close()
        wait_acked(self, (self.pub_weights,), timeout_s=5.0)
        self.get_logger().info(f'counters: {self.learner.counters}, version {self.learner.version}')


def main(args=None) -> int:
    return run_node(LearnerNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
