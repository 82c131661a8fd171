"""The operator's label of the current episode from a terminal: what a teleop device's chord or
pedal sends, for a cell without one (``ros.episode_events``).

    python -m rl_traj_ros.pipelines.episode_event /env_0/franka_env_node success \\
        --run-id RUN --secret-file run.key [--env-index 0]

``success`` ends the episode at the env's next step, terminated with reward 1; ``failure`` with
reward 0; ``re-record`` cuts it, drops it from the dataset and resets the env. Signed with the
run's secret (a real robot's env node takes nothing else) and stamped now. Exit 0 when the node
took it, 1 naming why it refused it (no episode running, no such env, ...), 2 when the service
does not answer within ``--timeout-s``.
"""
from __future__ import annotations

import argparse
import time

from .lifecycle import add_run_args, call_signed

LABELS = ('success', 'failure', 're-record')


def request(label: str, env_index: int, run_id: str, secret: bytes):
    """A LabelEpisode request for ``label``, stamped now and signed."""
    from .. import srv as S
    from ..delivery.run_guard import RunGuard
    from ..ros.run_link import canonical
    req = S.LabelEpisode.Request(run_id=run_id, label=label, env_index=env_index, stamp_ns=time.time_ns())
    req.auth = RunGuard(run_id, secret, True, print).sign(canonical(req))
    return req


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('node', help='the env node, e.g. /env_0/franka_env_node')
    ap.add_argument('label', choices=LABELS)
    ap.add_argument('--env-index', type=int, default=-1, help="the node's env to label; -1: every env")
    add_run_args(ap)
    args = ap.parse_args(argv)
    from .. import srv as S
    return call_signed(S.LabelEpisode, args.node.rstrip('/') + '/episode_event', args,
                       [(args.label, lambda secret: request(args.label, args.env_index, args.run_id, secret))],
                       'episode_event', 30.0)


if __name__ == '__main__':
    raise SystemExit(main())
