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
    ap.add_argument('--run-id', required=True, help="the node's run_id")
    ap.add_argument('--secret-file', required=True, help="the node's secret_file")
    ap.add_argument('--timeout-s', type=float, default=30.0, help='wait this long for the service')
    args = ap.parse_args(argv)
    import rclpy

    from .. import srv as S
    from ..delivery.run_guard import read_secret
    from ..ros import compat
    try:
        secret = read_secret(args.secret_file)
    except ValueError as e:
        print(f'[lifecycle] {e}', file=sys.stderr)
        return 2
    compat.init()
    node = rclpy.create_node('signed_lifecycle_client')
    service = args.node.rstrip('/') + '/signed_change_state'
    client = node.create_client(S.SignedChangeState, service)
    try:
        if not client.wait_for_service(timeout_sec=args.timeout_s):
            print(f'[lifecycle] {service} did not answer within {args.timeout_s} s', file=sys.stderr)
            return 2
        for t in args.transitions:
            r = compat.call(client, request(t, args.run_id, secret), 300.0, node=node)  # configure: the robot
            print(f'[lifecycle] {args.node} {t}: {r.message}', flush=True)
            if not r.success:
                return 1
        return 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    raise SystemExit(main())
