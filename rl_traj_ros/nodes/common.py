"""What every node shares: parameter declaration with descriptors, topic names, main()."""
from __future__ import annotations

import sys
import time
from typing import Any, Callable

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node

from ..delivery.stop import StopDrain
from ..params.shared import SHARED
from ..params.spec import SELECTORS, Config, Spec
from ..ros import compat
from .stop_signals import STOP, install as install_stop_signals

TOPICS = {
    'policy_input': 'policy_input',    # env -> policy (PolicyInput)
    'action_chunk': 'action_chunk',    # policy -> env (ActionChunk)
    'policy_part': 'policy_part',      # policy -> collector (PolicyPart)
    'env_part': 'env_part',            # policy -> collector (EnvPart)
    'trajectory': 'trajectory',        # collector -> writer (Trajectory)
    'intervention': 'intervention',    # teleop -> env (Intervention)
    'episode_event': 'episode_event',  # teleop -> env (EpisodeEvent: the operator's success / failure / re-record)
    'trajectory_ack': 'trajectory_ack',  # writer -> collector (TrajectoryAck: trajectories durably stored)
    'key_ack': 'key_ack',              # collector -> policy (KeyAck: every row of these chunks stored)
    'policy_weights': 'policy_weights',  # learner -> policy (PolicyWeights: new weights, model version)
    'learner_metrics': 'learner_metrics',  # learner -> anyone (diagnostic_msgs/DiagnosticArray per update)
}


def topic(node: Node, name: str) -> str:
    prefix = node.get_parameter('topic_prefix').value.rstrip('/')
    return f'{prefix}/{TOPICS[name]}'


def declare(node: Node, spec: Spec) -> Config:
    """Declare a node's parameters from its spec (``params/``) and return their values (typed, frozen).

    The spec is the one source of defaults (YAML and launch files only override). Every
    parameter is ``read_only``: nodes read their parameters once at start-up, so ``ros2 param
    set`` is refused instead of silently ignored. A range becomes the descriptor's range, so
    rclpy refuses a value outside it at start-up, with the parameter's name."""
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange
    spec = {'topic_prefix': SHARED['topic_prefix'], 'run_id': SHARED['run_id'], 'secret_file': SHARED['secret_file'],
            **spec}
    choice = None  # the algorithm (policy) first: it picks the defaults of the others (Param.per)
    for name in SELECTORS:
        if name in spec:
            choice = node.declare_parameter(name, spec[name].default, ParameterDescriptor(
                description=spec[name].description, read_only=True)).value
            break
    for name, p in spec.items():
        if node.has_parameter(name):
            continue
        desc = ParameterDescriptor(description=p.describe(), read_only=p.read_only)
        if p.range is not None and not isinstance(p.default, bool):
            lo, hi = p.range
            if isinstance(p.default, int):
                desc.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=1)]
            elif isinstance(p.default, float):
                desc.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi), step=0.0)]
        node.declare_parameter(name, p.default_for(choice), desc)
    return Config(spec, {name: node.get_parameter(name).value for name in spec})


def run_stats(node: Node, stats: Callable[[], dict]) -> dict:
    """``stats()`` with the node's run guard's counters (foreign, unsigned, forged), if it has one."""
    link = getattr(node, 'link', None)
    return {**stats(), **link.guard.counters} if link is not None else stats()


def hardware_id(node: Node) -> str:
    """The DiagnosticStatus.hardware_id of a node's statuses: two runs in one domain share the node
    names on /diagnostics, so a reader keeps its own run's by this."""
    return run_hardware_id(node.get_parameter('run_id').value)


def run_hardware_id(run_id: str) -> str:
    return f'rl_traj_ros run {run_id}'


def serve_stats(node: Node, stats: Callable[[], dict]) -> None:
    """``~/get_stats`` (GetStats): ``stats()`` as name/value pairs, for tools, tests and the CLI;
    with the node's ``run_id`` (another run's node of the same name answers the same service)."""
    from .. import srv as S

    def answer(request, response):
        st = run_stats(node, stats)
        response.names, response.values = list(st), [float(v) for v in st.values()]
        response.run_id = node.get_parameter('run_id').value
        return response
    node.create_service(S.GetStats, '~/get_stats', answer)


def diagnostics_publisher(node: Node, period_s: float, counters) -> Callable[[], Any]:
    """Publish ``counters()`` as a diagnostic_msgs/DiagnosticArray on /diagnostics (rqt, foxglove,
    and the CLI's progress) every ``period_s``; returns the publish function (it returns the
    publisher), for a last status before the node exits."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
    pub = node.create_publisher(DiagnosticArray, '/diagnostics', 10)

    def tick() -> None:
        values = run_stats(node, counters)
        status = DiagnosticStatus(name=node.get_fully_qualified_name(), hardware_id=hardware_id(node),
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


# The env's last request carries the EnvPart of its last chunk, which nothing resends: on a lossy
# link (20 % loss, test_multi_host) 10 s was seen to end the env node before the policy node had
# it, leaving that key unjoined. A reader that is gone counts as acknowledged, so this only waits
# on a reader that is still there.
LAST_ACK_S = 60.0


def last_ack_s(stop_deadline_s: float) -> float:
    """How long the env waits for its last request's acknowledgement: ``LAST_ACK_S``, or after a
    stop signal what is left of its ``stop_deadline_s`` (the nodes downstream end after it)."""
    return STOP.left_s(stop_deadline_s) if STOP.requested else LAST_ACK_S


ACKS_BY_S = 3.0  # after a stop signal no wait for DDS acknowledgements lasts past this (EXIT_BY_S below)


def wait_acked(node: Node, publishers, timeout_s: float = 10.0) -> None:
    """KEEP_ALL publishers hold samples until readers acknowledged them: wait before exiting. DDS
    acknowledges on the writer's heartbeat (seconds apart in Fast DDS), so after a stop signal the
    wait ends by ``ACKS_BY_S``: what must be stored is confirmed by the application's own acks."""
    from rclpy.duration import Duration
    if STOP.requested:
        timeout_s = min(timeout_s, STOP.left_s(ACKS_BY_S))
    for pub in publishers:
        try:
            if not pub.wait_for_all_acked(Duration(seconds=timeout_s)):
                node.get_logger().warning(f'{pub.topic_name}: not every sample acknowledged within {timeout_s} s')
        except Exception as e:  # noqa: BLE001 - context already gone: nothing left to wait for
            node.get_logger().warning(f'{pub.topic_name}: cannot wait for acknowledgements: {e}')


def stop_drain(node: Node, inputs: tuple[str, ...], delivered: Callable[[], bool], deadline_s: float,
               said_done: Callable[[], set] = set) -> StopDrain:
    """The node's end after a stop signal (``delivery.stop``): upstream = the nodes publishing on
    its input topics, less those (fully qualified names) that ``said_done`` (sent their last
    message, still flushing)."""
    names = [topic(node, n) for n in inputs]

    def upstream() -> int:
        done = said_done()
        return sum(f"{i.node_namespace.rstrip('/')}/{i.node_name}" not in done
                   for t in names for i in node.get_publishers_info_by_topic(t))
    return StopDrain(upstream, delivered, deadline_s)


def all_acked(*publishers) -> bool:
    """Every sample of these KEEP_ALL publishers acknowledged by its readers (now, no waiting)."""
    from rclpy.duration import Duration
    return all(pub.wait_for_all_acked(Duration(seconds=0)) for pub in publishers)


def run_node(factory: Callable[[], Node], args: list[str] | None = None) -> int:
    """init, spin until SIGINT/SIGTERM or the node asks to stop, then shut down cleanly:
    the node's ``shutdown()`` flushes whatever it holds before the context goes away. After a
    signal, a node with a ``stop_drain`` keeps serving until its upstream is done and what it sent
    is delivered (``delivery.stop``); from then on further signals are ignored, and the process
    exits by ``EXIT_BY_S`` after the first one (launch escalates to SIGTERM at 5 s).

    Signals only set a flag (``stop_signals``): rclpy's own handler would invalidate the context
    before ``shutdown()`` can flush, and a raised KeyboardInterrupt can land inside rclpy's
    destruction on the second signal that launch sends."""
    stop = install_stop_signals()
    if stop.requested:  # stopped while importing: nothing started, nothing to flush
        return 0
    try:
        compat.init(args=args if args is not None else sys.argv)
    except Exception as e:  # noqa: BLE001 - a malformed --ros-args: rcl says which part
        print(f'cannot start: {e}', file=sys.stderr, flush=True)
        return 1
    node = ex = None
    rc = 0
    try:
        node = factory()
        print(f'[{node.get_name()}] ready', flush=True)
        ex = compat.make_executor()
        ex.add_node(node)
        while rclpy.ok() and not getattr(node, 'finished', False) and not stop.requested:
            ex.spin_once(timeout_sec=0.1)
        if stop.requested:
            node.get_logger().info(f'{stop.name()}: stopping')
            drain = getattr(node, 'stop_drain', None)
            if drain is not None:
                drain.start(stop.at)
                while rclpy.ok() and (why := drain.poll()) is None:
                    ex.spin_once(timeout_sec=0.05)
                node.get_logger().info(f'{stop.name()}: {why}')
    except Exception as e:  # noqa: BLE001 - report, flush, exit non-zero
        name = node.get_name() if node is not None else getattr(factory, '__name__', 'node')
        print(f'[{name}] fatal: {e}', file=sys.stderr, flush=True)
        rc = 1
    finally:
        if node is not None:
            try:
                node.shutdown()  # flushed: from here on nothing is lost
            finally:
                rc = rc if not hasattr(node, 'exit_code') else (rc or node.exit_code)
                stop.ignore_further()  # a signal now (launch's, at a normal end) would only cut the teardown
                _exit_if_teardown_hangs(rc, TEARDOWN_S if stop.at is None else EXIT_BY_S - (time.monotonic() - stop.at))
                if ex is not None:
                    ex.shutdown(timeout_sec=1.0)
                node.destroy_node()
        rclpy.try_shutdown()  # (rcl's logging flushed and closed here)
    if stop.requested:  # everything flushed and shut down: the interpreter's finalization (torch's teardown,
        exit_now(rc)    # 0.5 s quiet, seconds on a loaded machine, past launch's 5 s) has nothing left to save
    return rc


TEARDOWN_S = 10.0  # at a normal end
EXIT_BY_S = 4.3    # after a stop signal, counted from the signal: launch sends SIGTERM at 5 s


def _exit_if_teardown_hangs(rc: int, within_s: float) -> None:
    """After the node flushed, rclpy's teardown (executor, node, context) can hang on a loaded
    machine (a policy node was seen alive long after its last log line, until SIGKILL). Nothing is
    left to lose then: exit with the node's code instead."""
    import threading
    within_s = max(0.2, within_s)

    def hard_exit() -> None:
        print(f'rclpy teardown not done {within_s:.1f} s after the flush: exiting {rc}', file=sys.stderr, flush=True)
        exit_now(rc)
    t = threading.Timer(within_s, hard_exit)
    t.daemon = True
    t.start()


def exit_now(rc: int) -> None:
    """Exit without the interpreter's finalization, after flushing Python's and C's stdio buffers
    (rcutils writes the console log with C stdio; on a pipe it is block-buffered)."""
    import ctypes
    import os
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader gone: nothing to keep
            pass
    ctypes.CDLL(None).fflush(None)
    os._exit(rc)
