"""The real Franka as a gymnasium env, driven by franky (libfranka); franky-sim stands in here.

Action ``[dx, dy, dz, drx, dry, drz, gripper]`` in [-1, 1] (6-D with ``no_gripper``): the
first six are scaled by ``action_scale`` (metres, radians) into a TCP pose delta; the gripper
is binary (>= 0.5 closes). Limits are enforced BEFORE anything is sent: the per-step delta is
clipped (``max_step_m``/``max_step_rad``, i.e. a velocity limit at ``control_dt``) and the
target position is clipped to the workspace box.

State (21 floats): TCP position [3], TCP orientation quaternion xyzw [4], TCP linear and
angular velocity [6], joint positions [7], gripper width [1].
Reward 1 and success once the TCP stayed within ``pos_tolerance``/``rot_tolerance`` of
``target_ee_pose`` for ``success_hold_steps`` consecutive steps (the episode then terminates);
an empty ``target_ee_pose`` has no pose success (the operator's labels or the success classifier
decide, ``reward_source``).
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces
import pinocchio as pin

from ..params.defaults import ENV

STATE_DIM = 21
JOINTS = [f'fr3_joint{i}' for i in range(1, 8)]  # franky / franky-sim's FR3 joint names
STATE_NAMES = ([f'tcp.{a}' for a in 'xyz'] + [f'tcp.q{a}' for a in 'xyzw'] + [f'tcp.v{a}' for a in 'xyz']
               + [f'tcp.w{a}' for a in 'xyz'] + [f'{j}.pos' for j in JOINTS] + ['gripper.width'])
ACTION_NAMES = ['delta_x', 'delta_y', 'delta_z', 'delta_rx', 'delta_ry', 'delta_rz', 'gripper']
HOME_JOINTS = (0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.785)


def quat_to_rot(q_xyzw: Sequence[float]) -> np.ndarray:
    x, y, z, w = (float(v) for v in q_xyzw)
    return pin.Quaternion(w, x, y, z).normalized().toRotationMatrix()


def rot_to_quat(r: np.ndarray) -> np.ndarray:
    return np.asarray(pin.Quaternion(r).coeffs())  # x, y, z, w


def target_pose(values: Sequence[float]) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """[x, y, z] | [x, y, z, rx, ry, rz] (rotation vector) | [x, y, z, qx, qy, qz, qw]; [] no pose
    target (a task whose success the operator or the success classifier decides)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return None, None
    if v.size == 3:
        return v, None
    if v.size == 6:
        return v[:3], pin.exp3(v[3:])
    if v.size == 7:
        return v[:3], quat_to_rot(v[3:])
    raise ValueError(f'target_ee_pose needs 3, 6 or 7 values, got {v.size}')


FCI_PORT = 1337  # libfranka's command connection (TCP); the gripper uses 1338
# Waits that were unbounded (a reset hung CI runs for minutes, the env's watchdog naming only "the
# robot moving home"): past these the reset stops the motion or says which part did not finish.
SETTLE_TIMEOUT_S = 30.0   # the last Cartesian step before the motion home
GRIPPER_TIMEOUT_S = 5.0   # a gripper command (one takes ~0.8 s on franky-sim)
HOME_TIMEOUT_S = 30.0     # the joint motion home (a few seconds); a motion not done by then is sent again once
_IN_FLIGHT: list = []     # (gripper, future) of commands still in flight at close: kept for the process's life


def check_reachable(robot_ip: str, timeout_s: float) -> None:
    """Fail fast, naming the address: libfranka waits for its TCP timeout (~60 s here) on an
    address that drops packets, and its error does not say which address it tried."""
    import socket
    try:
        socket.create_connection((robot_ip, FCI_PORT), timeout=timeout_s).close()
    except socket.gaierror as e:
        raise ConnectionError(f'robot_ip {robot_ip!r} is not an address: {e}') from e
    except OSError as e:
        why = f'no answer within {timeout_s:g} s' if isinstance(e, TimeoutError) else str(e)
        raise ConnectionError(f'robot_ip {robot_ip}: cannot reach the robot on TCP {FCI_PORT} ({why}); '
                              'check the address, the cable and that FCI is enabled in Desk') from e


def connect(make: Callable, robot_ip: str, timeout_s: float):
    """libfranka's connect, bounded: a host that accepts TCP 1337 but never answers the
    handshake (not a Franka controller, a proxy) would hold configure for its ~60 s timeout."""
    import threading
    out: dict = {}

    def run() -> None:
        try:
            out['robot'] = make()
        except Exception as e:  # noqa: BLE001 - reported below, with the address
            out['error'] = e
    t = threading.Thread(target=run, name='franky-connect', daemon=True)
    t.start()
    t.join(timeout_s)
    if 'robot' in out:
        return out['robot']
    if 'error' in out:
        raise ConnectionError(f"robot_ip {robot_ip}: franky could not connect: {out['error']}") from out['error']
    raise ConnectionError(f'robot_ip {robot_ip}: TCP {FCI_PORT} accepts connections but no libfranka answer came '
                          f'within {timeout_s:g} s: is that address the robot\'s FCI?')


class FrankaFrankyEnv(gym.Env):
    metadata = {'render_modes': []}
    robot_type = 'fr3'  # what franky drives (franky-sim simulates an FR3); the dataset's info.json says so

    def __init__(self, robot_ip: str, target_ee_pose: Sequence[float] = ENV.target_ee_pose,
                 action_scale: tuple[float, float] = ENV.action_scale, no_gripper: bool = ENV.no_gripper,
                 pos_tolerance: float = ENV.pos_tolerance, rot_tolerance: float = ENV.rot_tolerance,
                 success_hold_steps: int = ENV.success_hold_steps,
                 home_joints: Sequence[float] = HOME_JOINTS,
                 workspace_min: Sequence[float] = ENV.workspace_min, workspace_max: Sequence[float] = ENV.workspace_max,
                 max_step_m: float = ENV.max_step_m, max_step_rad: float = 0.2, control_dt: float = ENV.control_dt,
                 max_episode_steps: int = ENV.max_episode_steps, dynamics_factor: float = 0.2,
                 gripper_speed: float = 0.05,
                 gripper_force: float = 20.0, cameras: Optional[Callable[[], dict]] = None,
                 num_cameras: int = 0, image_size: int = ENV.image_size,
                 connect_timeout_s: float = ENV.connect_timeout_s):
        import franky
        self._franky = franky
        check_reachable(robot_ip, connect_timeout_s)
        self.robot = connect(lambda: franky.Robot(robot_ip, realtime_config=franky.RealtimeConfig.Ignore),
                             robot_ip, connect_timeout_s)
        self.robot.relative_dynamics_factor = dynamics_factor
        self.gripper = None if no_gripper else franky.Gripper(robot_ip)
        self.target_pos, self.target_rot = target_pose(target_ee_pose)
        self.pos_scale, self.rot_scale = action_scale
        self.no_gripper = no_gripper
        self.pos_tol, self.rot_tol, self.hold = pos_tolerance, rot_tolerance, success_hold_steps
        self.home = list(home_joints)
        self.ws_min, self.ws_max = np.asarray(workspace_min, float), np.asarray(workspace_max, float)
        self.max_step_m, self.max_step_rad = max_step_m, max_step_rad
        self.control_dt, self.max_episode_steps = control_dt, max_episode_steps
        self.gripper_speed, self.gripper_force = gripper_speed, gripper_force
        self.cameras = cameras
        dim = 6 if no_gripper else 7
        self.state_names, self.action_names = STATE_NAMES, ACTION_NAMES[:dim]
        self.action_space = spaces.Box(-1.0, 1.0, (dim,), np.float32)
        obs = {'states': spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)}
        if cameras is not None and num_cameras > 0:
            obs['main_images'] = spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
        if cameras is not None and num_cameras > 1:
            obs['extra_view_images'] = spaces.Box(0, 255, (num_cameras - 1, image_size, image_size, 3), np.uint8)
        self.observation_space = spaces.Dict(obs)
        self._closed_gripper = False
        self._in_tol = 0
        self._t = 0
        self.recoveries = 0
        self._gripper_future = None   # the gripper command in flight (franky's BoolFuture)

    # -- state --------------------------------------------------------------------------------
    def _tcp(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cs = self.robot.current_cartesian_state
        pose = cs.pose.end_effector_pose
        twist = cs.velocity.end_effector_twist
        vel = np.concatenate([np.asarray(twist.linear), np.asarray(twist.angular)])
        return np.asarray(pose.translation, float), quat_to_rot(pose.quaternion), vel

    def _obs(self) -> dict:
        pos, rot, vel = self._tcp()
        q = np.asarray(self.robot.current_joint_state.position, float)
        width = float(self.gripper.width) if self.gripper is not None else 0.0
        out = {'states': np.concatenate([pos, rot_to_quat(rot), vel, q, [width]]).astype(np.float32)}
        if self.cameras is not None:  # the frames that match this state's time (see envs/cameras.py)
            out.update(self.cameras())
        return out

    def _errors(self) -> tuple[float, float]:
        if self.target_pos is None:   # no pose target: never a pose success
            return float('inf'), float('inf')
        pos, rot, _ = self._tcp()
        dp = float(np.linalg.norm(pos - self.target_pos))
        dr = 0.0 if self.target_rot is None else float(np.linalg.norm(pin.log3(self.target_rot @ rot.T)))
        return dp, dr

    # -- commands -------------------------------------------------------------------------------
    def clip_target(self, pos: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Scaled, velocity-limited, workspace-clipped target (position, rotation vector delta)."""
        a = np.clip(np.asarray(action, float), -1.0, 1.0)
        dp = a[:3] * self.pos_scale
        n = np.linalg.norm(dp)
        if n > self.max_step_m:
            dp *= self.max_step_m / n
        dr = a[3:6] * self.rot_scale
        n = np.linalg.norm(dr)
        if n > self.max_step_rad:
            dr *= self.max_step_rad / n
        return np.clip(pos + dp, self.ws_min, self.ws_max), dr

    def _move(self, motion, asynchronous: bool) -> None:
        try:
            self._plan_and_move(motion, asynchronous)
        except self._franky.ControlException as e:  # try one recovery, then fail clearly
            self.recoveries += 1
            try:
                self.robot.recover_from_errors()
                self.robot.move(motion, asynchronous=asynchronous)
            except self._franky.ControlException as e2:
                raise RuntimeError(f'franky control error not recoverable: {e2} (first: {e})') from e2

    def _plan_and_move(self, motion, asynchronous: bool, attempts: int = 4) -> None:
        """A motion whose planning fails (Ruckig's synchronization error -111 while the first robot
        states still arrive, seen with franky-sim right after connecting) sent nothing: retried
        a few times, 0.3 s apart, then reported."""
        for i in range(attempts):
            try:
                self.robot.move(motion, asynchronous=asynchronous)
                return
            except RuntimeError as e:
                if 'Motion planner failed' not in str(e) or i == attempts - 1:
                    raise
                time.sleep(0.3)

    def _set_gripper(self, close: bool) -> None:
        """Command the gripper when no command of it is in flight, else at a later step (each step
        asks again: the newest wish wins). franky blocks a gripper command sent while another is in flight, and franky-sim
        then never answers either: a policy toggling the gripper within a control period hung the
        step for good (and the reset's open after it)."""
        if self.gripper is None:
            return
        if self._gripper_busy(0.0) or close == self._closed_gripper:
            return
        self._closed_gripper = close
        g = self.gripper
        self._gripper_future = (g.grasp_async(0.0, self.gripper_speed, self.gripper_force, epsilon_outer=1.0)
                                if close else g.move_async(0.08, self.gripper_speed))

    def _gripper_busy(self, wait_s: float) -> bool:
        """Whether the last gripper command is still in flight after waiting up to ``wait_s``."""
        if self._gripper_future is not None and not self._gripper_future.wait(wait_s):
            return True
        self._gripper_future = None
        return False

    # -- gym API ---------------------------------------------------------------------------------
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        f = self._franky
        self._settle()  # franky cannot switch motion type while the last Cartesian step still runs
        self._go_home()
        if self.gripper is not None:
            self._open_gripper()
        self._closed_gripper = False
        self._in_tol = 0
        self._t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray):
        t0 = time.monotonic()
        f = self._franky
        action = np.asarray(action, np.float32).reshape(-1)
        if action.shape[0] != self.action_space.shape[0]:
            raise ValueError(f'action has {action.shape[0]} dims, expected {self.action_space.shape[0]}')
        pos, rot, _ = self._tcp()
        target, drot = self.clip_target(pos, action)
        quat = rot_to_quat(pin.exp3(drot) @ rot)
        self._move(f.CartesianMotion(f.Affine(target.tolist(), quat.tolist()), f.ReferenceType.Absolute),
                   asynchronous=True)
        if not self.no_gripper:
            self._set_gripper(bool(action[6] >= 0.5))
        time.sleep(max(0.0, self.control_dt - (time.monotonic() - t0)))
        self._t += 1
        dp, dr = self._errors()
        self._in_tol = self._in_tol + 1 if (dp <= self.pos_tol and dr <= self.rot_tol) else 0
        success = self._in_tol >= self.hold
        truncated = self._t >= self.max_episode_steps and not success
        return self._obs(), float(success), success, truncated, {'succeed': success, 'pos_error': dp, 'rot_error': dr}

    def _open_gripper(self) -> None:
        """Open for the next episode, once the command in flight (if any) is done: each wait bounded."""
        for what in ('finish its last command', 'open'):
            if self._gripper_busy(GRIPPER_TIMEOUT_S):
                raise RuntimeError(f'reset: the gripper did not {what} within {GRIPPER_TIMEOUT_S} s '
                                   f'(width {float(self.gripper.width):.3f} m)')
            if what == 'open':
                break
            self._gripper_future = self.gripper.move_async(0.08, self.gripper_speed)
        self._closed_gripper = False

    def _go_home(self) -> None:
        """The joint motion home, asynchronous and joined with a bound: a synchronous move that the
        robot never reports done (seen on franky-sim under load, next to another run) held the
        env's step for good. Not done in ``HOME_TIMEOUT_S``: stopped, recovered and sent again
        once, then the reset fails, naming it (the node exits non-zero instead of hanging)."""
        f = self._franky
        for _ in range(2):
            self._move(f.JointWaypointMotion([f.JointWaypoint(self.home)]), asynchronous=True)
            try:
                if self.robot.join_motion(HOME_TIMEOUT_S):
                    return
            except f.ControlException as e:
                print(f'franky reset: the motion home failed ({e}); recovering', flush=True)
            self.robot.stop()
            self.robot.recover_from_errors()
        raise RuntimeError(f'reset: the robot did not reach its home joint positions within {HOME_TIMEOUT_S} s, twice')

    def _settle(self) -> None:
        try:
            if not self.robot.join_motion(SETTLE_TIMEOUT_S):
                self.robot.stop()
        except self._franky.ControlException:
            self.robot.recover_from_errors()

    def close(self) -> None:
        """Motion stopped on shutdown: let the last (short) step finish, then stop. The gripper's
        command in flight is waited for (bounded): its future must not outlive the gripper it uses
        (freed in any order once the env is, it crashed the process); one still in flight is kept."""
        try:
            self._settle()
            if hasattr(self.robot, 'stop'):
                self.robot.stop()
        except Exception as e:  # noqa: BLE001 - nothing left to stop
            print(f'franky close: {e}')
        if self.gripper is not None and self._gripper_busy(GRIPPER_TIMEOUT_S):
            _IN_FLIGHT.append((self.gripper, self._gripper_future))
