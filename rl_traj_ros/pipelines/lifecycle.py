"""Signed lifecycle transitions of an env node: ``ros2 lifecycle set`` for a real robot's env node,
which takes only its run's (``ros.signed_lifecycle``).

    python -m rl_traj_ros.pipelines.lifecycle /env_0/franka_env_node configure activate \\
        --run-id RUN --secret-file run.key

Each transition in order, each signed (HMAC-SHA256 under the secret) and stamped; exit 0 once all
succeeded, 1 naming the first that did not (nothing after it is tried), 2 when the node's service
does not answer within ``--timeout-s``. The real-robot launch files run it after starting the env node.
"""
from __future__ import annotations

import argparse
import sys
import time


def request(transition: str, run_id: str, secret: bytes):
    """A SignedChangeState request for ``transition``, stamped now and signed."""
    from .. import srv as S
    from ..delivery.run_guard import RunGuard
    from ..ros.run_link import canonical
    req = S.SignedChangeState.Request(run_id=run_id, transition=transition, stamp_ns=time.time_ns())
    req.auth = RunGuard(run_id, secret, True, print).sign(canonical(req))
    return req


def main(argv=None) -> int:
    from ..ros.signed_lifecycle import TRANSITIONS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('node', help='the env node, e.g. /env_0/franka_env_node')
    ap.add_argument('transitions', nargs='+', choices=TRANSITIONS)
    add_run_args(ap)
    args = ap.parse_args(argv)
    from .. import srv as S
    return call_signed(S.SignedChangeState, args.node.rstrip('/') + '/signed_change_state', args,
                       [(t, lambda secret, t=t: request(t, args.run_id, secret)) for t in args.transitions],
                       'lifecycle', 300.0)  # configure: connecting to the robot


def add_run_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument('--run-id', required=True, help="the node's run_id")
    ap.add_argument('--secret-file', required=True, help="the node's secret_file")
    ap.add_argument('--timeout-s', type=float, default=30.0, help='wait this long for the service')


def call_signed(srv_type, service: str, args, requests, tag: str, call_timeout_s: float) -> int:
    """Call ``service`` with each (name, make(secret)) request in order: 0 once all succeeded, 1
    naming the first that did not (nothing after it is sent), 2 when the service does not answer
    within ``--timeout-s`` or the secret file is refused."""
    import rclpy

    from ..delivery.run_guard import read_secret
    from ..ros import compat
    try:
        secret = read_secret(args.secret_file)
    except ValueError as e:
        print(f'[{tag}] {e}', file=sys.stderr)
        return 2
    compat.init()
    node = rclpy.create_node(f'signed_{tag}_client')
    client = node.create_client(srv_type, service)
    try:
        if not client.wait_for_service(timeout_sec=args.timeout_s):
            print(f'[{tag}] {service} did not answer within {args.timeout_s} s', file=sys.stderr)
            return 2
        for name, make in requests:
            try:
                r = compat.call(client, make(secret), call_timeout_s, node=node)
            except TimeoutError as e:  # the node went away after answering wait_for_service
                print(f'[{tag}] {e}', file=sys.stderr)
                return 2
            print(f'[{tag}] {service} {name}: {r.message}', flush=True)
            if not r.success:
                return 1
        return 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    raise SystemExit(main())
