"""Lifecycle transitions of an env node, signed by its run: configure and activate are what let a
real robot move, and lifecycle_msgs/ChangeState carries no signature, so another run's tooling
(a launch of the same node name in the same domain) reached this node through it.

``~/signed_change_state`` (SignedChangeState) takes a transition by name with the run id, a
wall-clock stamp and the HMAC of the three under the run's secret (``delivery.run_guard``); a
stamp not newer than the last one taken, or older than ``FRESH_S``, is a replay and refused. With
``require_signed`` (a real robot's default) the standard ``~/change_state`` refuses every
transition, saying which service to use (its readers, ``get_state`` and the transition events,
stay). ``python -m rl_traj_ros.pipelines.lifecycle`` is the client.
"""
from __future__ import annotations

import time

from .run_link import RunLink, canonical

FRESH_S = 60.0   # a signed request older than this (by the node's wall clock) is refused: a replay
TRANSITIONS = ('configure', 'activate', 'deactivate', 'cleanup', 'shutdown')


def serve_signed_lifecycle(node, link: RunLink, require_signed: bool) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn

    from .. import srv as S
    log = node.get_logger()
    last = {'stamp_ns': 0}
    if require_signed:
        def unsigned(request, response):
            link.guard.counters['unsigned'] += 1
            log.warning('refused a lifecycle transition on ~/change_state: this node takes only signed ones '
                        '(~/signed_change_state: python -m rl_traj_ros.pipelines.lifecycle NODE TRANSITION '
                        '--run-id RUN --secret-file FILE)')
            response.success = False
            return response
        node._service_change_state.callback = unsigned   # rclpy keeps the service; only its answer changes

    def signed(request, response):
        age_s = (time.time_ns() - request.stamp_ns) / 1e9
        if link.guard.secret is None:
            response.message = 'this node has no secret_file: it cannot check a signed transition'
        elif not link.guard.admit('~/signed_change_state', request.run_id, bytes(request.auth),
                                  lambda: canonical(request)):
            response.message = f'not signed by run {link.run_id!r}'
        elif request.stamp_ns <= last['stamp_ns'] or not -FRESH_S < age_s < FRESH_S:
            response.message = f'stamp {age_s:.1f} s old or not newer than the last transition taken: a replay?'
        elif request.transition not in TRANSITIONS:
            response.message = f'unknown transition {request.transition!r} (one of {", ".join(TRANSITIONS)})'
        else:
            last['stamp_ns'] = request.stamp_ns
            try:
                done = getattr(node, f'trigger_{request.transition}')()
            except Exception as e:  # noqa: BLE001 - rclpy's RCLError: not a transition of the current state
                response.message = f'{request.transition} is not possible now: {e}'
                return response
            response.success = done == TransitionCallbackReturn.SUCCESS
            response.message = f'{request.transition}: {"done" if response.success else "failed"}'
            return response
        log.warning(f'refused a signed lifecycle transition {request.transition!r}: {response.message}')
        return response
    node.create_service(S.SignedChangeState, '~/signed_change_state', signed)
