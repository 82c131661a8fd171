#!/usr/bin/env bash
# README command 1: set up (idempotent) and run the main job.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tools/setup.sh"
# shellcheck source=/dev/null
. "$ROOT/env.sh"
cd "$ROOT"
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( ($$ % 100) + 100 ))}"
if [ $# -eq 0 ]; then set -- run sim_collect; fi
exec python -m rl_traj_ros.cli "$@"
