"""What every node shares: parameter declaration with descriptors, topic names, main()."""
from __future__ import annotations

import signal
import sys
from typing import Any, Callable

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node

TOPIC_PREFIX = '/rl_traj'
TOPICS = {
    'policy_input': 'policy_input',    # env -> policy (PolicyInput)
    'action_chunk': 'action_chunk',    # policy -> env (ActionChunk)
    'policy_part': 'policy_part',      # policy -> collector (PolicyPart)
    'env_part': 'env_part',            # policy -> collector (EnvPart)
    'trajectory': 'trajectory',        # collector -> writer (Trajectory)
    'intervention': 'intervention',    # teleop -> env (Intervention)
    'trajectory_ack': 'trajectory_ack',  # writer -> collector (TrajectoryAck: trajectories durably stored)
    'key_ack': 'key_ack',              # collector -> policy (KeyAck: every row of these chunks stored)
    'policy_weights': 'policy_weights',  # learner -> policy (PolicyWeights: new weights, model version)
    'learner_metrics': 'learner_metrics',  # learner -> anyone (diagnostic_msgs/DiagnosticArray per update)
}


def topic(node: Node, name: str) -> str:
    prefix = node.get_parameter('topic_prefix').value.rstrip('/')
    return f'{prefix}/{TOPICS[name]}'


# Ranges of the shape and sizing parameters every node shares (rclpy refuses a value outside
# them at start-up, with the parameter's name, instead of failing later in the data path).
RANGES: dict[str, tuple[float, float]] = {
    'num_envs': (1, 4096), 'num_env_nodes': (1, 4096), 'chunk': (1, 1024), 'action_dim': (1, 64),
    'num_epochs': (1, 1024),
    'chunks_per_epoch': (1, 100000), 'num_shards': (1, 4096), 'num_actors': (1, 4096),
    'micro_batch_size': (0, 1 << 20), 'cache_size': (0, 100000), 'sample_window_size': (0, 1 << 30),
    'max_pending_writes': (1, 100000), 'dedupe_window': (1, 1 << 24), 'max_unacked_keys': (1, 1 << 24),
    'gamma': (0.0, 1.0), 'gae_lambda': (0.0, 1.0), 'resend_after_s': (0.1, 86400.0),
    'pending_timeout_s': (0.1, 86400.0), 'teleop_timeout_s': (0.0, 86400.0), 'reply_timeout_s': (0.1, 86400.0),
    # node-specific numbers (a name means the same thing in every node that declares it)
    'image_size': (16, 4096), 'max_episode_steps': (1, 1 << 30), 'fps': (1, 1000), 'finalize_interval': (0, 1 << 30),
    'camera_topic_rate_hz': (0.0, 1000.0), 'intervention_timeout_s': (0.0, 3600.0), 'request_resend_s': (0.1, 3600.0),
    'diagnostics_period_s': (0.0, 3600.0), 'num_steps': (0, 1 << 40), 'start_step': (0, 1 << 40),
    'target_successes': (0, 1 << 40), 'state_dim': (1, 1 << 20), 'hidden': (1, 1 << 16), 'expert_noise': (0.0, 10.0),
    'num_train_states': (1, 1 << 40), 'num_eval_states': (0, 1 << 40), 'success_hold_steps': (1, 100000),
    'pos_tolerance': (0.0, 1.0), 'rot_tolerance': (0.0, 3.1416), 'max_step_m': (0.0, 0.5), 'control_dt': (0.001, 10.0),
    'max_version_lag': (-1, 1 << 30), 'lr': (0.0, 1.0), 'ppo_epochs': (1, 1000), 'minibatch_size': (1, 1 << 24),
    'clip_ratio': (0.0, 1.0), 'value_clip': (0.0, 1000.0), 'entropy_coef': (0.0, 10.0), 'value_coef': (0.0, 100.0),
    'max_grad_norm': (0.0, 1e6), 'target_kl': (0.0, 10.0), 'num_updates': (0, 1 << 40),
    'inline_max_bytes': (0, 1 << 31), 'rate_hz': (1.0, 10000.0), 'latch_s': (0.0, 60.0),
    'task_id': (0, 1), 'actor_rank': (0, 4095), 'catch_up_period_s': (0.05, 3600.0), 'snapshot_every': (0, 1 << 30),
    'warm_start_epochs': (0, 100000), 'critic_warmup': (0, 1 << 30),
}


def declare(node: Node, params: dict[str, tuple[Any, str]]) -> dict[str, Any]:
    """Declare parameters up front (default, description) and return their values.

    The declaration is the one source of defaults (YAML and launch files only override). Every
    parameter is ``read_only``: nodes read their parameters once at start-up, so ``ros2 param
    set`` is refused instead of silently ignored. Shared sizing parameters carry ``RANGES``."""
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange
    params = {'topic_prefix': (TOPIC_PREFIX, 'namespace of the data-path topics'), **params}
    for name, (default, doc) in params.items():
        desc = ParameterDescriptor(description=doc, read_only=True)
        if name in RANGES and not isinstance(default, bool):
            lo, hi = RANGES[name]
            if isinstance(default, int):
                desc.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=1)]
            elif isinstance(default, float):
                desc.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi), step=0.0)]
        node.declare_parameter(name, default, desc)
    return {name: node.get_parameter(name).value for name in params}


def make_executor():
    """EventsExecutor where available: 2.4-6x the message rate of the SingleThreadedExecutor
    here; the MultiThreadedExecutor is pathological in this rclpy (research notes)."""
    try:
        from rclpy.experimental import EventsExecutor
        return EventsExecutor()
    except ImportError:  # pragma: no cover - older rclpy
        from rclpy.executors import SingleThreadedExecutor
        return SingleThreadedExecutor()


def serve_stats(node: Node, stats: Callable[[], dict]) -> None:
    """``~/get_stats`` (GetStats): ``stats()`` as name/value pairs, for tools, tests and the CLI."""
    from .. import srv as S

    def answer(request, response):
        st = stats()
        response.names, response.values = list(st), [float(v) for v in st.values()]
        return response
    node.create_service(S.GetStats, '~/get_stats', answer)


def diagnostics_publisher(node: Node, period_s: float, counters) -> Callable[[], Any]:
    """Publish ``counters()`` as a diagnostic_msgs/DiagnosticArray on /diagnostics (rqt, foxglove,
    and the CLI's progress) every ``period_s``; returns the publish function (it returns the
    publisher), for a last status before the node exits."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
    pub = node.create_publisher(DiagnosticArray, '/diagnostics', 10)

    def tick() -> None:
        values = counters()
        status = DiagnosticStatus(name=node.get_fully_qualified_name(), hardware_id='rl_traj_ros',
                                  message=', '.join(f'{k}={v}' for k, v in values.items()),
                                  values=[KeyValue(key=str(k), value=str(v)) for k, v in values.items()])
        bad = values.get('rejected', 0) or values.get('decode_errors', 0) or values.get('expired', 0)
        status.level = DiagnosticStatus.WARN if bad else DiagnosticStatus.OK
        arr = DiagnosticArray(status=[status])
        arr.header.stamp = node.get_clock().now().to_msg()
        pub.publish(arr)
        return pub
    if period_s > 0:
        node.create_timer(period_s, tick)
    return tick


def wait_acked(node: Node, publishers, timeout_s: float = 10.0) -> None:
    """KEEP_ALL publishers hold samples until readers acknowledged them: wait before exiting."""
    from rclpy.duration import Duration
    for pub in publishers:
        try:
            if not pub.wait_for_all_acked(Duration(seconds=timeout_s)):
                node.get_logger().warn(f'{pub.topic_name}: not every sample acknowledged within {timeout_s} s')
        except Exception as e:  # noqa: BLE001 - context already gone: nothing left to wait for
            node.get_logger().warn(f'{pub.topic_name}: cannot wait for acknowledgements: {e}')


def run_node(factory: Callable[[], Node], args: list[str] | None = None) -> int:
    """init, spin until SIGINT/SIGTERM or the node asks to stop, then shut down cleanly:
    the node's ``shutdown()`` flushes whatever it holds before the context goes away."""
    # rclpy's own SIGINT handler would invalidate the context before shutdown() can flush;
    # take SIGINT as KeyboardInterrupt instead and treat SIGTERM the same way.
    from rclpy.signals import SignalHandlerOptions
    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)

    def on_term(signum, frame):
        raise KeyboardInterrupt
    # explicitly for SIGINT too: a process started in the background of a script (`node &`)
    # inherits SIGINT as ignored, and Python then installs no KeyboardInterrupt handler
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    node = None
    rc = 0
    try:
        node = factory()
        print(f'[{node.get_name()}] ready', flush=True)
        ex = make_executor()
        ex.add_node(node)
        while rclpy.ok() and not getattr(node, 'finished', False):
            ex.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    except Exception as e:  # noqa: BLE001 - report, flush, exit non-zero
        print(f'[{getattr(node, "get_name", lambda: "node")()}] fatal: {e!r}', file=sys.stderr, flush=True)
        rc = 1
    finally:
        if node is not None:
            try:
                node.shutdown()
            finally:
                node.destroy_node()
        rclpy.try_shutdown()
    return rc if node is None or not hasattr(node, 'exit_code') else (rc or node.exit_code)
