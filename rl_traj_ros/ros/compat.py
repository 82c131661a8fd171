"""Every rclpy difference this package meets between the supported distros, in one place.

Jazzy (the LTS, rclpy 7.1.x) and Kilted (rclpy 9.1.x) run the same code; nodes, pipelines and
tests call these helpers instead of asking which distro they are on. Each difference is
detected by what rclpy offers, not by a distro name, so a point release that adds a feature
simply gets it (EventsExecutor arrived in Jazzy's 7.1.4). What differs, measured on both
(test/test_compat.py checks each against the running rclpy):

- ``Client.call(request, timeout_sec)``: returns None on a timeout in 7.1, raises TimeoutError
  in 9.1. ``call`` raises TimeoutError on both, and never needs a second spinning thread.
- ``rclpy.init()``: returns None in 7.1, a context manager in 9.1. ``init`` returns the
  context on both and never installs rclpy's signal handlers (``nodes/stop_signals`` owns them:
  rclpy's handler would invalidate the context before a node has flushed).
- ``rclpy.experimental.EventsExecutor``: from 7.1.4; ``make_executor`` falls back to the
  SingleThreadedExecutor where it is missing (Humble).
- Deprecations that warn in one distro and not the other (``logger.warn``: 9.1 only; a
  name-only ``declare_parameter`` and ``rclpy.qos_event``: both) are not used here;
  test_compat.py fails if one comes back.
"""
from __future__ import annotations

import time
from typing import Any, Optional

import rclpy


def rclpy_version() -> tuple[int, ...]:
    """(major, minor, patch) of the running rclpy ((0,) when no distribution metadata says: an
    apt install without pip's metadata)."""
    from importlib import metadata
    for dist in ('ros-rclpy', 'rclpy'):
        try:
            return tuple(int(p) for p in metadata.version(dist).split('.')[:3])
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return (0,)


def init(args: Optional[list[str]] = None, context: Optional[rclpy.context.Context] = None):
    """``rclpy.init`` without rclpy's signal handlers; returns the context it initialized (Kilted's
    ``rclpy.init`` returns a context manager, Jazzy's None: callers get the same on both)."""
    from rclpy.signals import SignalHandlerOptions
    rclpy.init(args=args, context=context, signal_handler_options=SignalHandlerOptions.NO)
    return context if context is not None else rclpy.get_default_context()


def has_events_executor() -> bool:
    try:
        from rclpy.experimental import EventsExecutor  # noqa: F401
        return True
    except ImportError:
        return False


def make_executor(context=None):
    """EventsExecutor where available: 2.4-6x the message rate of the SingleThreadedExecutor
    here; the MultiThreadedExecutor is pathological in this rclpy (research notes)."""
    if has_events_executor():
        from rclpy.experimental import EventsExecutor
        return EventsExecutor(context=context)
    from rclpy.executors import SingleThreadedExecutor
    return SingleThreadedExecutor(context=context)


def call(client, request, timeout_s: float, executor=None, node=None) -> Any:
    """One service call, spun here (``executor``, else ``node`` alone): the response, or
    TimeoutError naming the service when it does not answer within ``timeout_s`` (Jazzy's
    ``Client.call`` would return None, Kilted's raise; both need another thread spinning)."""
    deadline = time.monotonic() + timeout_s
    if not client.wait_for_service(timeout_sec=timeout_s):
        raise TimeoutError(f'service {client.srv_name}: not available within {timeout_s:g} s')
    fut = client.call_async(request)
    while not fut.done():
        left = deadline - time.monotonic()
        if left <= 0:
            client.remove_pending_request(fut)
            raise TimeoutError(f'service {client.srv_name}: no answer within {timeout_s:g} s')
        if executor is not None:
            executor.spin_once(timeout_sec=min(left, 0.05))
        else:
            rclpy.spin_once(node, timeout_sec=min(left, 0.05))
    return fut.result()
