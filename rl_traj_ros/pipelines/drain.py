"""Wait until everything the collector flushed is stored: the end of a collection run.

Used by ``sim_collect.run_ros`` (the CLI) and by the launch files, which start it once every
env node has exited 0 and shut the launch down when it returns: ``python -m
rl_traj_ros.pipelines.drain [--timeout-s S]`` exits 0 once the collector has no pending key
and no unacknowledged trajectory (read from the nodes' ``get_stats`` services, twice in a
row, so a part still in flight is not missed), 1 with the reason on a timeout.
"""
from __future__ import annotations

import argparse
import sys
import time

COLLECTOR_STATS = '/trajectory_collector_node/get_stats'
WRITER_STATS = '/replay_buffer_writer_node/get_stats'


def stats(node, service: str, run_id: str | None = None, timeout_s: float = 5.0) -> dict[str, float]:
    """A node's GetStats counters ({} when the service does not answer); with ``run_id``, that
    run's node's: another run's node of the same name answers the same service, so a call is
    repeated until this run's node answered it."""
    from .. import srv as S
    from ..ros import compat
    cli = node.create_client(S.GetStats, service)
    try:
        for _ in range(8):
            r = compat.call(cli, S.GetStats.Request(), 3 * timeout_s, node=node)
            if run_id is None or r.run_id == run_id:
                return dict(zip(r.names, r.values))
        return {}
    except TimeoutError:
        return {}
    finally:
        node.destroy_client(cli)


def drained(col: dict, wr: dict) -> bool:
    return bool(col and wr) and col.get('pending_keys', 1) == 0 and col.get('unacked', 1) == 0


def wait_stored(node, timeout_s: float = 120.0, period_s: float = 0.5,
                run_id: str | None = None) -> tuple[bool, dict, dict]:
    """(drained, collector stats, writer stats): drained twice in a row with the same counts."""
    deadline = time.monotonic() + timeout_s
    col, wr, last = {}, {}, None
    while time.monotonic() < deadline:
        col, wr = stats(node, COLLECTOR_STATS, run_id), stats(node, WRITER_STATS, run_id)
        if drained(col, wr):
            now = (col.get('parts'), col.get('published'), wr.get('stored'), wr.get('duplicates'))
            if now == last:
                return True, col, wr
            last = now
        else:
            last = None
        time.sleep(period_s)
    return False, col, wr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--timeout-s', type=float, default=120.0)
    ap.add_argument('--run-id', default=None, help="the launch's run_id: its nodes' counters, not another run's")
    args = ap.parse_args(argv)
    import rclpy
    rclpy.init()
    node = rclpy.create_node('collection_drain')
    try:
        ok, col, wr = wait_stored(node, args.timeout_s, run_id=args.run_id)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    if not ok:
        print(f'[drain] not everything was stored within {args.timeout_s} s: collector {col}, writer {wr}',
              file=sys.stderr, flush=True)
        return 1
    print(f"[drain] everything stored: {int(wr.get('stored', 0))} trajectories "
          f"({int(wr.get('trajectories', 0))} in the buffer), collector {col}", flush=True)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
