"""franka_env_node: owns ``num_envs`` simulated Franka envs and drives them chunk by chunk.

Sends PolicyInputs (current obs + new key + previous chunk's EnvPart), executes the returned
action chunk, applies fresh Intervention messages (the expert action replaces the policy's;
flags recorded), optionally records episodes with CollectEpisode, and publishes the front
camera on a sensor_msgs/Image side topic at a configurable rate. Exits when its training
steps (or its success target) are done, after its last message was acknowledged.

A managed lifecycle node (``ros2 lifecycle set``; the real-robot launch drives it with
``autostart:=false``): *configure* makes the env (connects to the robot; an unreachable robot
fails the transition and the node exits 1), *activate* enables motion (the first reset moves
the robot home, so nothing moves before it), *deactivate* holds the robot before its next
motion command (the chunk in flight finishes), *cleanup* / *shutdown* end the run: the
episodes are flushed and the robot is released. Motion happens only while active. With
``autostart`` (default: the sim, the CLI) the node configures and activates itself.
"""
from __future__ import annotations

if __name__ == '__main__':  # first, before the heavy imports below: see stop_signals
    from rl_traj_ros.nodes.stop_signals import install
    install()

import threading
import time
from typing import Optional

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import Image, JointState

from .. import msg as M
from ..assembly import joint_positions, make_env, rollout_config
from ..envs.cameras import CameraFrames, parse_cameras
from ..params.env_node import ENV_NODE
from ..rollout.env_loop import EnvLoop, InterventionLatch, RatePacer, TeleopGate, Transport
from ..rollout.workers import EnvStats, EnvWorker
from ..ros import conversion as cv
from ..ros.images import CameraSubscriber, rgb_image_msg
from ..ros.qos import DATA_QOS, SIDE_QOS, TELEOP_QOS
from .common import declare, diagnostics_publisher, run_node, serve_stats, topic, wait_acked

CONFIGURE_TIMEOUT_S = 120.0  # making the env: MuJoCo + EGL, or connecting to the robot


class FrankaEnvNode(LifecycleNode):
    def __init__(self):
        super().__init__('franka_env_node')
        p = self.p = declare(self, ENV_NODE)
        if p['env_type'] == 'franky' and p['num_envs'] != 1:
            raise ValueError(f"env_type franky drives one robot: num_envs must be 1, got {p['num_envs']}")
        if p['env_type'] == 'franky' and p['action_dim'] != (6 if p['no_gripper'] else 7):
            raise ValueError(f"action_dim must be {6 if p['no_gripper'] else 7} with no_gripper={p['no_gripper']}")
        self.cfg = rollout_config(p)
        self.cameras = self._camera_subscriber(p)
        self.interventions = InterventionLatch(p['action_dim'], p['intervention_timeout_s'])
        self.pub_req = self.create_publisher(M.PolicyInput, topic(self, 'policy_input'), DATA_QOS)
        self.pub_cam = self.create_publisher(Image, 'camera/front', SIDE_QOS)
        self.pub_joints = self.create_publisher(JointState, 'joint_states', SIDE_QOS)  # env 0, e.g. for GELLO
        self.create_subscription(M.ActionChunk, topic(self, 'action_chunk'), self.on_actions, DATA_QOS)
        self.sub_teleop = self.create_subscription(M.Intervention, topic(self, 'intervention'), self.on_intervention,
                                                   TELEOP_QOS)
        self._stop, self._made, self._active = threading.Event(), threading.Event(), threading.Event()
        log = self.get_logger()
        self.loop: Optional[EnvLoop] = None
        self.gate = TeleopGate(p['require_teleop'], p['teleop_timeout_s'], self.sub_teleop.get_publisher_count,
                               self.sub_teleop.topic_name, self._stop, log.info, log.warn, log.error)
        self.env = self.worker = self._make_error = self._thread = self._t_last = None
        self._last_cam, self._joints = 0.0, []
        self.finished, self.exit_code, self._flushed = False, 0, False
        serve_stats(self, self.stats)   # progress: ~/get_stats and /diagnostics (a last status at exit)
        self._publish_status = diagnostics_publisher(self, p['diagnostics_period_s'], self.stats)
        if p['autostart'] and self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
            self.trigger_activate()

    def _camera_subscriber(self, p) -> Optional[CameraSubscriber]:
        specs = parse_cameras(p['camera_names'], p['camera_topics'])
        if not specs:
            return None
        if p['env_type'] != 'franky':
            raise ValueError('camera_topics are for env_type franky: the sim renders its own cameras (image_obs)')
        p['camera_names'] = [c.name for c in specs]  # the dataset's observation.images.<name>, main first
        frames = CameraFrames(specs, p['image_size'], p['camera_sync_tolerance_s'], p['camera_wait_s'])
        sub = CameraSubscriber(self.get_name(), self.get_namespace(), frames)
        frames.clock = sub.clock_s
        self.get_logger().info('cameras: ' + ', '.join(f'{c.name} <- {c.topic}' for c in specs))
        return sub

    # -- lifecycle (executor thread) ---------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Make the env in the rollout thread (an EGL context is bound to its thread) and wait
        for it: connecting to the robot happens here, moving it does not."""
        if self._thread is not None:
            self.get_logger().error('configure after cleanup: a run ends at cleanup; start a new node')
            return TransitionCallbackReturn.FAILURE
        self._thread = threading.Thread(target=self._loop, name='env-loop', daemon=True)
        self._thread.start()
        if not self._made.wait(CONFIGURE_TIMEOUT_S) or self._make_error is not None:
            why = self._make_error or f'no env within {CONFIGURE_TIMEOUT_S} s'
            self.get_logger().error(f'configure failed, nothing moved: {why}; exit_code=1')
            self._stop.set()
            self.exit_code, self.finished = 1, True
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info('configured: env ready, motion disabled until activate')
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().info('activated: motion enabled')
        self._active.set()
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active.clear()
        self.get_logger().info('deactivated: holding before the next motion command')
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._end_run('cleanup')

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._end_run('shutdown')

    def _end_run(self, why: str) -> TransitionCallbackReturn:
        self.get_logger().info(f'{why}: ending the run, flushing episodes and releasing the env')
        self._active.clear()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.finished = True
        return TransitionCallbackReturn.SUCCESS

    # -- subscriptions (executor thread) ---------------------------------------------------------
    def on_actions(self, m: M.ActionChunk) -> None:
        try:
            reply = cv.action_chunk_from_msg(m)
        except ValueError as e:
            self.get_logger().error(f'rejected ActionChunk: {e}')
            return
        if self.loop is not None:
            self.loop.deliver(reply.sources, reply.actions)

    def on_intervention(self, m: M.Intervention) -> None:
        why = self.interventions.offer(m.action, m.active, m.env_index)
        if why:
            self.get_logger().warn(why)

    # -- the rollout loop (own thread) ----------------------------------------------------------
    def _loop(self) -> None:
        try:
            try:
                frames = self.cameras.frames if self.cameras is not None else None
                if frames is not None:  # before the robot: a silent camera fails configure, robot untouched
                    self.cameras.wait_ready(self.p['camera_configure_timeout_s'])
                self.env = make_env(self.p, frames)
                self.worker = EnvWorker(self.cfg, self.env, self.interventions)
                self._joints = joint_positions(self.env)
                transport = Transport(self._encode, self.pub_req.publish, lambda: self.pub_req.get_subscription_count() > 0)
                self.loop = EnvLoop(self.worker, transport, self.p['request_resend_s'], self.p['reply_timeout_s'],
                                    RatePacer(self.p['control_rate_hz'], self.p['chunk'], self._stop), self.gate,
                                    self._active, self._stop, self._side_topics, self._progress)
            except Exception as e:  # noqa: BLE001 - on_configure reports it and fails the transition
                self._make_error = e
                self.exit_code = 1  # before the last log line below, so that it says so
                return
            finally:
                self._made.set()
            self.loop.run()
            self.exit_code = int(self.gate.failed)
        except Exception as e:  # noqa: BLE001
            self.get_logger().error(f'rollout loop failed: {e!r}')
            self.exit_code = 1
        finally:
            self._t_last = time.monotonic()
            wait_acked(self, (self.pub_req,))
            if self.env is not None:
                self.env.close()  # in this thread (EGL); CollectEpisode flushes and finalizes here
            self._flushed = True
            if self._make_error is None:  # else configure reports the failure, as the last line
                self.get_logger().info('done: ' + ' '.join(f'{k}={v:g}' for k, v in self.stats().items()))
            wait_acked(self, (self._publish_status(),), timeout_s=5.0)  # the last status reaches its readers
            self.finished = True

    def _encode(self, req) -> M.PolicyInput:
        msg = cv.policy_input_to_msg(req)
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg

    def stats(self) -> dict[str, float]:
        s = self.worker.stats if self.worker is not None else EnvStats()
        end = self._t_last if self._t_last is not None else time.monotonic()
        t_first, wait_s = (self.loop.t_first, self.loop.wait_s) if self.loop is not None else (None, 0.0)
        return {'steps': s.chunks // (self.cfg.num_epochs * self.cfg.chunks_per_epoch), 'chunks': s.chunks,
                'episodes': s.episodes, 'successes': s.successes, 'env_s': round(s.env_time_s, 3),
                'loop_s': round(end - (t_first or end), 3), 'wait_s': round(wait_s, 3),
                'active': int(self._active.is_set()), 'finished': int(self._flushed), 'exit_code': self.exit_code}

    def _progress(self) -> None:
        s = self.worker.stats
        if s.chunks % 10 == 0:
            rate = s.successes / s.episodes if s.episodes else 0.0
            self.get_logger().info(f'chunks={s.chunks} ({s.chunks / (time.monotonic() - s.started):.1f}/s) '
                                   f'episodes={s.episodes} successes={s.successes} ({rate:.0%})')

    def _side_topics(self, req) -> None:
        """Env 0's joint positions (``joint_states``, e.g. for GELLO) and, at ``camera_topic_rate_hz``,
        its front camera (``camera/front``): what rviz and a teleop follower read."""
        stamp = self.get_clock().now().to_msg()
        if 'states' in req.obs and self._joints:
            s = req.obs['states'][0]
            m = JointState(name=[f'fr3_joint{i}' for i in range(1, 8)], position=[float(s[i]) for i in self._joints])
            m.header.stamp = stamp
            self.pub_joints.publish(m)
        rate = self.p['camera_topic_rate_hz']
        if rate > 0 and 'main_images' in req.obs and time.monotonic() - self._last_cam >= 1.0 / rate:
            self._last_cam = time.monotonic()
            self.pub_cam.publish(rgb_image_msg(req.obs['main_images'][0].numpy(), stamp, f'env_{self.cfg.env_rank}_front'))

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self.cameras is not None:
            self.cameras.close()


def main(args=None) -> int:
    return run_node(FrankaEnvNode, args)


if __name__ == '__main__':
    raise SystemExit(main())
