"""franka_env_node: owns ``num_envs`` Franka envs (the sim, or one franky robot) and drives them chunk by chunk.

Sends PolicyInputs (obs + new key + previous chunk's EnvPart), executes the returned action chunk
(its run's, signed: ``ros.run_link``) with the operator's fresh Interventions, records episodes,
shows env 0's joints and front camera on side topics; the operator's episode labels (``episode_event``
topic, ``~/episode_event`` service) end an episode as success, failure or re-record, and
``reward_source`` says what gives the reward (the env, the success classifier, the operator:
``rewards.step_reward``). Protocol: ``rollout.env_loop``; thread: ``rollout.env_run``. A managed lifecycle node (signed on a real robot: ``ros.signed_lifecycle``):
configure makes the env (connects to the robot; failure: exit 1, nothing moved), activate enables
motion (the first reset moves the robot home), deactivate holds before the next motion command,
cleanup / shutdown end the run (episodes flushed, robot released). ``autostart``: both at once.
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

from .. import msg as M
from ..assembly import joint_positions, make_env, rollout_config, set_torch_threads
from ..params.env_node import ENV_NODE
from ..rollout.env_loop import EnvLoop, InterventionLatch, RatePacer, TeleopGate, Transport
from ..rollout.env_run import EnvRunner
from ..rollout.workers import EnvWorker
from ..ros import conversion as cv
from ..ros.episode_events import serve_episode_events
from ..ros.images import CameraSubscriber
from ..ros.qos import DATA_QOS, EVENT_QOS, TELEOP_QOS
from ..ros.run_link import RunLink
from ..ros.signed_lifecycle import serve_signed_lifecycle
from ..ros.side_topics import SideTopics
from .common import declare, diagnostics_publisher, last_ack_s, run_node, run_stats, serve_stats, topic, wait_acked

CONFIGURE_TIMEOUT_S = 120.0  # making the env: MuJoCo + EGL, or connecting to the robot


class FrankaEnvNode(LifecycleNode):
    def __init__(self):
        super().__init__('franka_env_node')
        log = self.get_logger()
        self.cameras, p = CameraSubscriber.from_params(self, declare(self, ENV_NODE), log.info)
        self.p, self.cfg = p, rollout_config(p)
        self.interventions, self.link = InterventionLatch(p['action_dim'], p['intervention_timeout_s']), RunLink(self, p)
        self.pub_req = self.link.publisher(M.PolicyInput, topic(self, 'policy_input'), DATA_QOS)
        self.side = SideTopics(self, p['camera_topic_rate_hz'], f'env_{self.cfg.env_rank}_front', p['run_id'])
        self.link.subscription(M.ActionChunk, topic(self, 'action_chunk'), self.on_actions, DATA_QOS)
        self.sub_teleop = self.link.subscription(M.Intervention, topic(self, 'intervention'), self.on_intervention,
                                                 TELEOP_QOS)
        self.run = EnvRunner(self._make_env, self._make_loop,
                             lambda: wait_acked(self, (self.pub_req,), last_ack_s(p['stop_deadline_s'])),
                             self._closed, log.error, log.warning, p['stall_warn_s'])
        self.gate = TeleopGate(p['require_teleop'], p['teleop_timeout_s'], self.sub_teleop.get_publisher_count,
                               self.sub_teleop.topic_name, self.run.stop, log.info, log.warning, log.error)
        serve_stats(self, self.stats)   # progress: ~/get_stats and /diagnostics (a last status at exit)
        serve_signed_lifecycle(self, self.link, p['require_signed'])  # a real robot: only its run's transitions
        self.labels = serve_episode_events(self, self.link, p['num_envs'], self.run.running,  # the operator's
                                           topic(self, 'episode_event'), EVENT_QOS)          # success / failure
        self._publish_status = diagnostics_publisher(self, p['diagnostics_period_s'], self.stats)
        if p['autostart'] and self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
            self.trigger_activate()

    finished, exit_code = property(lambda self: self.run.finished), property(lambda self: self.run.exit_code)

    # -- lifecycle (executor thread) ---------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Make the env in the rollout thread and wait: connecting to the robot happens here, moving it does not."""
        why = self.run.start(CONFIGURE_TIMEOUT_S)
        if why is not None:
            self.get_logger().error(f'configure failed, nothing moved: {why}; exit_code={self.run.exit_code}')
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info('configured: env ready, motion disabled until activate')
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().info('activated: motion enabled')
        self.run.active.set()
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.run.active.clear()
        self.get_logger().info('deactivated: holding before the next motion command')
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._end_run('cleanup')

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._end_run('shutdown')

    def _end_run(self, why: str) -> TransitionCallbackReturn:
        self.get_logger().info(f'{why}: ending the run, flushing episodes and releasing the env')
        self.run.end()
        return TransitionCallbackReturn.SUCCESS

    # -- subscriptions (executor thread) ---------------------------------------------------------
    def on_actions(self, m: M.ActionChunk) -> None:
        try:
            reply = cv.action_chunk_from_msg(m)
        except ValueError as e:
            return self.get_logger().error(f'rejected ActionChunk: {e}')
        if why := (self.run.loop.deliver(reply.sources, reply.actions) if self.run.loop is not None else None):
            self.get_logger().error(why)  # as if it had not come: resent, then the reply timeout

    def on_intervention(self, m: M.Intervention) -> None:
        stamp_ns = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
        if why := self.interventions.offer(m.action, m.active, m.env_index, stamp_ns, m.source_device):
            self.get_logger().warning(why)

    # -- the rollout thread (EnvRunner) ---------------------------------------------------------
    def _make_env(self):
        frames = self.cameras.frames if self.cameras is not None else None
        if frames is not None:  # before the robot: a silent camera fails configure, robot untouched
            self.cameras.wait_ready(self.p['camera_configure_timeout_s'])
        set_torch_threads(self.p['torch_threads'])   # in the rollout thread, before the classifier loads
        return make_env(self.p, frames, self.labels)

    def _make_loop(self, env) -> EnvLoop:
        self.side.joints = joint_positions(env)
        transport = Transport(self._encode, self.pub_req.publish, lambda: self.pub_req.get_subscription_count() > 0)
        return EnvLoop(EnvWorker(self.cfg, env, self.interventions), transport, self.p['request_resend_s'],
                       self.p['reply_timeout_s'], RatePacer(self.p['control_rate_hz'], self.p['chunk'], self.run.stop),
                       self.gate, self.run.active, self.run.stop, self.side, self._progress)

    def _closed(self, made: bool) -> None:
        if made:  # else configure reports the failure, as the last line
            self.get_logger().info('done: ' + ' '.join(f'{k}={v:g}' for k, v in run_stats(self, self.stats).items()))
        wait_acked(self, (self._publish_status(),), min(5.0, last_ack_s(self.p['stop_deadline_s'])))  # to its readers

    def _encode(self, req) -> M.PolicyInput:
        msg = cv.policy_input_to_msg(req)
        msg.header.stamp, msg.header.frame_id = self.get_clock().now().to_msg(), self.get_fully_qualified_name()
        return msg

    def _progress(self) -> None:
        if line := self.run.progress():
            self.get_logger().info(line)

    def stats(self) -> dict[str, float]:
        return self.run.stats(self.cfg.num_epochs * self.cfg.chunks_per_epoch)

    def shutdown(self) -> None:
        self.run.end()
        if self.cameras is not None:
            self.cameras.close()


def main(args=None) -> int:
    return run_node(FrankaEnvNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
