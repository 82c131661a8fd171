"""What the launch files share (needs `launch`/`launch_ros`): end when the job is done, fail
when a required node dies.

- Once every env node exited 0, ``python -m rl_traj_ros.pipelines.drain`` waits until the
  writer stored everything the collector flushed; then the launch shuts down (every node gets
  SIGINT and flushes) and ``ros2 launch`` exits 0, like the CLI.
- An env node that exits non-zero, a required node (teleop device, writer, collector, policy)
  that exits before the job is done, or a drain that times out fails the launch: the reason
  is logged and ``ros2 launch`` exits 1. The env node itself never moves the robot without its
  teleop device (``require_teleop``), so a dead teleop node stops the run before any motion.
"""
from __future__ import annotations

import atexit
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from launch.actions import ExecuteProcess, LogInfo, OpaqueFunction, RegisterEventHandler, Shutdown
from launch.event_handlers import OnProcessExit


class RequiredNodeFailed(RuntimeError):
    """Raised inside the launch: LaunchService logs it, shuts down and returns 1."""


def _fail(reason: str) -> OpaqueFunction:
    def raise_(context):
        raise RequiredNodeFailed(reason)
    return OpaqueFunction(function=raise_)


def identify(params: dict) -> str:
    """One run id and secret for the launch's nodes (``ros_run.run_identity``), in every node's
    parameter dict; the run id."""
    from .ros_run import run_identity
    return run_identity(params.values())[0]


def supervise(env_nodes: Sequence, required: Sequence, run_id: str, drain_timeout_s: float = 120.0) -> list:
    """Event handlers that end the launch with the job (exit 0) or with a failure (exit 1)."""
    exited: dict[int, int] = {}
    state = {'done': False, 'failed': False}

    def fail(reason: str) -> list:
        if state['failed']:
            return []
        state['failed'] = True
        return [_fail(reason)]
    drain = ExecuteProcess(cmd=[sys.executable, '-m', 'rl_traj_ros.pipelines.drain', '--timeout-s',
                                str(drain_timeout_s), '--run-id', run_id], name='drain', output='screen')

    def on_env_exit(event, context):
        exited[id(event.action)] = event.returncode
        if context.is_shutdown:
            return None  # Ctrl-C or another node's failure: every node is being stopped
        if event.returncode != 0:
            return fail(f'{event.action.name} exited with {event.returncode}: the collection failed '
                        '(see its log above)')
        if len(exited) == len(env_nodes):
            state['done'] = True
            return [drain]
        return None

    def on_required_exit(event, context):
        if state['done'] or context.is_shutdown:
            return None  # the job is over, or Ctrl-C: nodes stop because the launch shuts down
        return fail(f'required node {event.action.name} exited with {event.returncode} before the job was '
                    'done; nothing is collected without it')

    def on_drain_exit(event, context):
        if event.returncode != 0:
            return fail('collection finished but not everything was stored in time (see [drain] above)')
        return [Shutdown(reason='collection done, everything stored')]

    handlers = [RegisterEventHandler(OnProcessExit(target_action=n, on_exit=on_env_exit)) for n in env_nodes]
    handlers += [RegisterEventHandler(OnProcessExit(target_action=n, on_exit=on_required_exit)) for n in required]
    handlers.append(RegisterEventHandler(OnProcessExit(target_action=drain, on_exit=on_drain_exit)))
    return handlers


def run_outputs(pipeline: str, out: str | Path, at_exit: Optional[Callable[[Path], None]] = None) -> tuple[dict, list]:
    """What a launch does around its output directory, as the CLI does: every node's ROS log
    under ``<out>/node_logs/`` (the nodes' ``additional_env``), the absolute directory printed
    first, and at the end of ``ros2 launch`` the run's closing work (``at_exit``, e.g. the
    learning curve), then a run directory that recorded nothing removed."""
    from .run_dir import discard_if_empty
    out = Path(out).resolve()
    existed = out.exists() and any(out.iterdir())

    def finish() -> None:
        if at_exit is not None and out.is_dir():
            try:
                at_exit(out)
            except Exception as e:  # noqa: BLE001 - the run's data is there; only the extra is missing
                print(f'[{pipeline}] {e}', file=sys.stderr)
        if not existed:
            _discard_empty_tree(out)
            discard_if_empty(out)
    atexit.register(finish)
    return {'ROS_LOG_DIR': str(out / 'node_logs')}, [LogInfo(msg=f'[{pipeline}] output: {out}')]


def _discard_empty_tree(out: Path) -> None:
    """Directories the nodes created but never wrote into (a launch that failed at once)."""
    for d in sorted((p for p in out.rglob('*') if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()


def real_robot_nodes(params: dict, extra: dict, env_vars: dict) -> list:
    """The real-robot launch (real_collect, real_train): this package's nodes with their
    parameter dicts, the extra processes (teleop device, camera driver: required), and the env
    node started unconfigured (``autostart: false``), then configured (connect to the robot and
    cameras) and activated (motion) by its run's signed transitions (``pipelines.lifecycle``:
    lifecycle_msgs/ChangeState carries no signature, so a real robot's env node refuses it). An
    unreachable robot or silent camera fails configure and the node exits 1, nothing moved; exit 0
    once the env node is done and everything is stored."""
    from launch_ros.actions import Node
    run_id = identify(params)
    secret = params['franka_env_node']['secret_file']
    mine = ['-p', f'run_id:={run_id}', '-p', f'secret_file:={secret}']
    nodes = [Node(package='rl_traj_ros', executable=name, name=name, parameters=[params[name]], output='screen',
                  additional_env=env_vars) for name in params if name != 'franka_env_node']
    required = []
    for module, ros_args in extra.values():
        if module in params:  # a node of this package with its parameter dict (real_train's learner): above
            continue
        package, executable = module.split('/', 1) if '/' in module else ('rl_traj_ros', module)
        required.append(Node(package=package, executable=executable, output='screen', additional_env=env_vars,
                             arguments=['--ros-args', *ros_args, *(mine if '/' not in module else [])],
                             **({'name': module} if '/' not in module else {})))
    env = Node(package='rl_traj_ros', executable='franka_env_node', name='franka_env_node', namespace='env_0',
               parameters=[{**params['franka_env_node'], 'autostart': False}], output='screen',
               additional_env=env_vars)
    lifecycle = ExecuteProcess(cmd=[sys.executable, '-m', 'rl_traj_ros.pipelines.lifecycle', '/env_0/franka_env_node',
                                    'configure', 'activate', '--run-id', run_id, '--secret-file', secret],
                               name='lifecycle', output='screen')

    def on_lifecycle_exit(event, context):
        if event.returncode != 0 and not context.is_shutdown:
            return [_fail(f'the env node was not configured and activated (lifecycle exit {event.returncode}: '
                          'see [lifecycle] above); nothing moved')]
        return None
    return [*nodes, *required, env, lifecycle,
            RegisterEventHandler(OnProcessExit(target_action=lifecycle, on_exit=on_lifecycle_exit)),
            *supervise([env], [*nodes, *required], run_id)]
