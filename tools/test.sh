#!/usr/bin/env bash
# README command 2: set up (idempotent) and run the whole test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tools/setup.sh"
# The multi-host packet-loss test drops packets with nftables (Debian package); as root we
# install it, otherwise that one test skips.
if [ "$(id -u)" = 0 ] && ! command -v nft >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq nftables) >/dev/null 2>&1 \
    || echo "[test] could not install nftables; the packet-loss test will skip" >&2
fi
# LeRobot 0.6.1 (Python 3.12, its own venv, ~3.7 GB once): policy 'lerobot' runs checkpoints in it and its
# tests compare with stock LeRobot; RL_TRAJ_ROS_LEROBOT=0 leaves it out (those tests then skip, named).
if [ "${RL_TRAJ_ROS_LEROBOT:-}" != 0 ]; then
  bash "$ROOT/tools/lerobot_venv.sh" >/dev/null \
    || echo "[test] could not make the LeRobot venv (tools/lerobot_venv.sh); its tests will skip" >&2
fi
# shellcheck source=/dev/null
. "$ROOT/env.sh"
cd "$ROOT"
# pytest's own exit code: 5 (no tests collected) fails like any other failure. Two workers, a test
# file per worker (module fixtures such as franky-sim run once), each worker in its own DDS domain
# (test/conftest.py): most tests wait on DDS, simulated robots and control rates, not on the CPU.
exec python -m pytest test/ -q -p no:cacheprovider --timeout=300 -n "${RL_TRAJ_ROS_TEST_WORKERS:-2}" \
  --dist loadfile "$@"
