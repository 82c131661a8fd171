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

import numpy as np
import rclpy
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import Image, JointState

from .. import msg as M
from ..delivery.resend import RESEND, TIMEOUT, ReplyWait
from ..envs.cameras import CameraFrames, parse_cameras
from ..envs.sim_franka import sim_env_from_params
from ..episodes import CollectEpisode, collect_episode_kwargs
from ..params.env_node import ENV_NODE
from ..assembly import rollout_config
from ..rollout.workers import EnvStats, EnvWorker
from ..ros import conversion as cv
from ..ros.images import CameraSubscriber
from ..ros.qos import DATA_QOS, SIDE_QOS, TELEOP_QOS
from .common import declare, diagnostics_publisher, run_node, serve_stats, topic, wait_acked


CONFIGURE_TIMEOUT_S = 120.0  # making the env: MuJoCo + EGL, or connecting to the robot


class FrankaEnvNode(LifecycleNode):
    def __init__(self):
        super().__init__('franka_env_node')
        p = declare(self, ENV_NODE)
        if p['env_type'] == 'franky' and p['num_envs'] != 1:
            if 'num_envs' in getattr(self, '_parameter_overrides', {}):
                raise ValueError(f"env_type franky drives one robot: num_envs must be 1, got {p['num_envs']}")
            p['num_envs'] = 1  # the shared default (2) is the sim's
        for k in ('num_envs', 'chunk', 'action_dim', 'num_epochs', 'chunks_per_epoch'):
            if p[k] < 1:
                raise ValueError(f'{k} must be >= 1, got {p[k]}')
        if p['env_type'] == 'franky' and p['action_dim'] != (6 if p['no_gripper'] else 7):
            raise ValueError(f"action_dim must be {6 if p['no_gripper'] else 7} with no_gripper={p['no_gripper']}")
        self.p = p
        self.cameras = self._camera_subscriber(p)
        self.reply_wait = ReplyWait(p['request_resend_s'], p['reply_timeout_s'])
        self.cfg = rollout_config(p)
        self.env = None     # made in the rollout thread: an EGL context is bound to its thread
        self.worker: Optional[EnvWorker] = None
        self._latest_intervention: Optional[tuple[float, M.Intervention]] = None
        self.pub_req = self.create_publisher(M.PolicyInput, topic(self, 'policy_input'), DATA_QOS)
        self.pub_cam = self.create_publisher(Image, 'camera/front', SIDE_QOS)
        self.pub_joints = self.create_publisher(JointState, 'joint_states', SIDE_QOS)  # env 0, e.g. for GELLO
        self.create_subscription(M.ActionChunk, topic(self, 'action_chunk'), self.on_actions, DATA_QOS)
        self.sub_teleop = self.create_subscription(M.Intervention, topic(self, 'intervention'), self.on_intervention,
                                                   TELEOP_QOS)
        self._reply = threading.Event()
        self._actions = None
        self._waiting_for = None
        self._last_cam = 0.0
        self._stop = threading.Event()
        self._t_first: Optional[float] = None  # first request sent (after discovery)
        self._next_chunk_at = 0.0              # control_rate_hz: when the next chunk may start
        self._t_last: Optional[float] = None  # loop left (before the shutdown flush and env.close())
        self._wait_s = 0.0  # time blocked on the policy's reply: the round trip as the env sees it
        self.finished = False
        self.exit_code = 0
        self._flushed = False  # the loop has ended and the env (its episode datasets) is closed
        # progress for tools and the CLI: ~/get_stats and /diagnostics (a last status at exit)
        serve_stats(self, self.stats)
        self._publish_status = diagnostics_publisher(self, p['diagnostics_period_s'], self.stats)
        self._made = threading.Event()   # the rollout thread made the env (or failed to)
        self._active = threading.Event()  # motion enabled (lifecycle state active)
        self._make_error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
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
        self._end_run('cleanup')
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._end_run('shutdown')
        return TransitionCallbackReturn.SUCCESS

    def _end_run(self, why: str) -> None:
        self.get_logger().info(f'{why}: ending the run, flushing episodes and releasing the env')
        self._active.clear()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.finished = True

    def _wait_active(self) -> bool:
        """Block while not active (nothing moves); False when the node is stopping."""
        while not self._active.wait(0.1):
            if self._stop.is_set():
                return False
        return True

    # -- subscriptions (executor thread) ---------------------------------------------------------
    def on_actions(self, m: M.ActionChunk) -> None:
        try:
            reply = cv.action_chunk_from_msg(m)
        except ValueError as e:
            self.get_logger().error(f'rejected ActionChunk: {e}')
            return
        if self._waiting_for is not None and reply.sources == self._waiting_for:
            self._actions = reply.actions.clone()
            self._reply.set()

    def on_intervention(self, m: M.Intervention) -> None:
        if len(m.action) != self.cfg.action_dim:
            self.get_logger().warn(f'ignored Intervention with {len(m.action)} dims (expected {self.cfg.action_dim})')
            return
        self._latest_intervention = (time.monotonic(), m)

    def _intervention(self):
        latest = self._latest_intervention
        if latest is None or time.monotonic() - latest[0] > self.p['intervention_timeout_s']:
            return None
        m = latest[1]
        return np.asarray(m.action, np.float32), bool(m.active), int(m.env_index)

    # -- the rollout loop (own thread) ----------------------------------------------------------
    def _make_env(self):
        p = self.p
        if p['env_type'] == 'franky':
            from ..envs.batched import BatchedEnv
            from ..envs.franky_env import FrankaFrankyEnv
            frames = self.cameras.frames if self.cameras is not None else None
            if p['observation'] == 'pixels' and frames is None:
                raise ValueError("observation 'pixels' needs camera_topics: the policy would act without seeing")
            if frames is not None:  # before the robot: a silent camera fails configure, robot untouched
                self.cameras.wait_ready(p['camera_configure_timeout_s'])
            robots = [FrankaFrankyEnv(p['robot_ip'], list(p['target_ee_pose']), tuple(p['action_scale']),
                                      p['no_gripper'], p['pos_tolerance'], p['rot_tolerance'], p['success_hold_steps'],
                                      workspace_min=list(p['workspace_min']), workspace_max=list(p['workspace_max']),
                                      max_step_m=p['max_step_m'], control_dt=p['control_dt'],
                                      max_episode_steps=p['max_episode_steps'], connect_timeout_s=p['connect_timeout_s'],
                                      cameras=frames.observation if frames else None,
                                      num_cameras=len(frames.cameras) if frames else 0, image_size=p['image_size'])]
            env = BatchedEnv(robots, lambda i, raw: raw, p['task_description'], p['seed'])
        elif p['env_type'] == 'sim':
            env = sim_env_from_params(p, p['env_rank'])
        else:
            raise ValueError(f"env_type must be 'sim' or 'franky', got {p['env_type']!r}")
        if p['collect_episodes']:
            try:
                env = CollectEpisode(env, f"{p['collect_dir']}/env_{p['env_rank']}", rank=p['env_rank'],
                                     num_envs=p['num_envs'], **collect_episode_kwargs(p))
            except Exception:
                env.close()  # here, in its own (EGL) thread, not in a destructor after EGL is gone
                raise
        return env

    def _loop(self) -> None:
        try:
            try:
                self.env = self._make_env()
                self.worker = EnvWorker(self.cfg, self.env, self._intervention)
            except Exception as e:  # noqa: BLE001 - on_configure reports it and fails the transition
                self._make_error = e
                self.exit_code = 1  # before the last log line below, so that it says so
                return
            finally:
                self._made.set()
            # before reset: resetting moves the robot home
            if not self._wait_active() or not self._teleop_present():
                return
            gen = self.worker.run()
            req = next(gen)
            while rclpy.ok() and not self._stop.is_set():
                self._publish_camera(req)
                self._publish_joints(req)
                msg = cv.policy_input_to_msg(req)
                msg.header.stamp = self.get_clock().now().to_msg()
                if not req.sources:  # terminal request: carries the last EnvPart only
                    self.pub_req.publish(msg)
                    break
                self._waiting_for = req.sources
                self._reply.clear()
                while self.pub_req.get_subscription_count() == 0 and rclpy.ok():
                    if self._stop.is_set():  # Ctrl-C while no policy node is up: stop at once
                        return
                    time.sleep(0.05)  # wait for the policy node to be discovered
                if self._t_first is None:
                    self._t_first = time.monotonic()
                self._hold_rate()
                self.pub_req.publish(msg)
                self.reply_wait.sent()
                while not self._reply.wait(0.1):
                    if self._stop.is_set():
                        return
                    due = self.reply_wait.poll()
                    if due == RESEND:
                        self.pub_req.publish(msg)
                    elif due == TIMEOUT:
                        raise TimeoutError(f'no action chunk for {req.sources[0].key.as_tuple()} within '
                                           f"{self.p['reply_timeout_s']} s")
                self._wait_s += self.reply_wait.waited_s()
                # deactivated: hold here; the operator's device went away: no further motion
                if not self._wait_active() or not self._teleop_present():
                    return
                req = gen.send(self._actions)
                self._progress()
        except Exception as e:  # noqa: BLE001
            self.get_logger().error(f'rollout loop failed: {e!r}')
            self.exit_code = 1
        finally:
            self._t_last = time.monotonic()
            wait_acked(self, (self.pub_req,))
            if self.env is not None:
                self.env.close()  # in this thread (EGL); CollectEpisode flushes and finalizes here
            self._flushed = True
            st = self.stats()
            if self._make_error is None:  # else configure reports the failure, as the last line
                self.get_logger().info('done: ' + ' '.join(f'{k}={v:g}' for k, v in st.items()))
            wait_acked(self, (self._publish_status(),), timeout_s=5.0)  # the last status reaches its readers
            self.finished = True

    def stats(self) -> dict[str, float]:
        s = self.worker.stats if self.worker is not None else EnvStats()
        end = self._t_last if self._t_last is not None else time.monotonic()
        return {'steps': s.chunks // (self.cfg.num_epochs * self.cfg.chunks_per_epoch), 'chunks': s.chunks,
                'episodes': s.episodes, 'successes': s.successes, 'env_s': round(s.env_time_s, 3),
                'loop_s': round(end - (self._t_first or end), 3), 'wait_s': round(self._wait_s, 3),
                'active': int(self._active.is_set()), 'finished': int(self._flushed), 'exit_code': self.exit_code}

    def _teleop_present(self) -> bool:
        """With ``require_teleop``: True once a teleop device publishes Interventions; waits up to
        ``teleop_timeout_s``, then fails the node (exit 1) with the reason. Nothing moves meanwhile."""
        if not self.p['require_teleop'] or self.sub_teleop.get_publisher_count() > 0:
            return True
        name = self.sub_teleop.topic_name
        self.get_logger().warn(f'no teleop device publishes on {name}: holding the robot still '
                               f"(up to {self.p['teleop_timeout_s']} s)")
        deadline = time.monotonic() + self.p['teleop_timeout_s']
        while time.monotonic() < deadline and not self._stop.is_set():
            if self.sub_teleop.get_publisher_count() > 0:
                self.get_logger().info(f'teleop device on {name}: moving')
                return True
            time.sleep(0.1)
        if not self._stop.is_set():
            self.get_logger().error(f"no teleop device on {name} within {self.p['teleop_timeout_s']} s: stopping "
                                    'without sending a motion command (is the SpaceMouse/GELLO connected?)')
            self.exit_code = 1
        return False

    def _hold_rate(self) -> None:
        """``control_rate_hz`` > 0: no faster than that many control steps a second (a sim stepping
        like the robot it stands for, so a learner trains between steps as it would there)."""
        rate = self.p['control_rate_hz']
        if rate <= 0:
            return
        now = time.monotonic()
        if self._next_chunk_at > now:
            self._stop.wait(self._next_chunk_at - now)
        self._next_chunk_at = max(self._next_chunk_at, now) + self.p['chunk'] / rate  # no burst after a stall

    def _progress(self) -> None:
        s = self.worker.stats
        if s.chunks % 10 == 0:
            dt = time.monotonic() - s.started
            rate = s.successes / s.episodes if s.episodes else 0.0
            self.get_logger().info(f'chunks={s.chunks} ({s.chunks / dt:.1f}/s) episodes={s.episodes} '
                                   f'successes={s.successes} ({rate:.0%})')

    def _publish_joints(self, req) -> None:
        if 'states' not in req.obs:
            return
        s = req.obs['states'][0].numpy()
        q = slice(13, 20) if self.p['env_type'] == 'franky' else slice(0, 7)  # see each env's state layout
        m = JointState(name=[f'fr3_joint{i}' for i in range(1, 8)], position=[float(x) for x in s[q]])
        m.header.stamp = self.get_clock().now().to_msg()
        self.pub_joints.publish(m)

    def _publish_camera(self, req) -> None:
        rate = self.p['camera_topic_rate_hz']
        if rate <= 0 or 'main_images' not in req.obs or time.monotonic() - self._last_cam < 1.0 / rate:
            return
        self._last_cam = time.monotonic()
        img = req.obs['main_images'][0].numpy()
        m = Image(height=img.shape[0], width=img.shape[1], encoding='rgb8', step=img.shape[1] * 3)
        m.header.stamp = self.get_clock().now().to_msg()
        m.header.frame_id = f'env_{self.cfg.env_rank}_front'
        m.data = img.tobytes()
        self.pub_cam.publish(m)

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
