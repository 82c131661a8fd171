"""`rl-traj-ros`: run the project's pipelines without `launch` (same nodes, same YAML)."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='rl-traj-ros', description=__doc__)
    sub = parser.add_subparsers(dest='command', required=True)
    smoke = sub.add_parser('smoke', help='publish every message type to an echo process and verify it')
    smoke.add_argument('--envs', type=int, default=8)
    smoke.add_argument('--image-size', type=int, default=128)
    args = parser.parse_args(argv)
    if args.command == 'smoke':
        from .pipelines.smoke import run_smoke
        return run_smoke(args.envs, args.image_size)
    return 2


if __name__ == '__main__':
    sys.exit(main())
