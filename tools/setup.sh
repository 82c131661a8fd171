#!/usr/bin/env bash
# Idempotent set-up: venv + pinned ROS 2 Kilted wheels + torch (CPU) + message build.
# Every step is skipped when its inputs did not change, so a second run takes seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${RL_TRAJ_ROS_PYTHON:-python3.11}"
log() { printf '[setup] %s\n' "$*" >&2; }
hash_of() { cat "$@" 2>/dev/null | sha256sum | cut -d' ' -f1; }
# The venv must live OUTSIDE the source tree: CMake refuses to export targets whose include
# paths (numpy's, from the venv) lie inside the package's source directory. It is keyed by
# the lock file, so checkouts with the same pins share one venv; .venv links to it.
VENV="${RL_TRAJ_ROS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rl_traj_ros/venv-$(hash_of requirements.lock | cut -c1-12)}"

# 1. venv -------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv at $VENV ($PY)"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
ln -sfn "$VENV" "$ROOT/.venv"
VPY="$VENV/bin/python"

# 2. pinned packages ---------------------------------------------------------------
req_hash="$(hash_of requirements.lock)"
if [ "$(cat "$VENV/.req_hash" 2>/dev/null)" != "$req_hash" ]; then
  log "installing pinned packages (requirements.lock)"
  # torch first and by exact version: the local CPU wheel, never a multi-GB CUDA build.
  "$VPY" -m pip install -q --disable-pip-version-check "torch==2.13.0" 2> >(grep -v "is ignored: it is neither" >&2)
  "$VPY" -m pip install -q --disable-pip-version-check -r requirements.lock 2> >(grep -v "is ignored: it is neither" >&2)
  # The wheels' exported CMake targets name the wheel builder's interpreter paths.
  inc="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  npinc="$("$VPY" -c 'import numpy; print(numpy.get_include())')"
  # (|| true: a venv repaired before, e.g. one named by RL_TRAJ_ROS_VENV, has nothing left to fix)
  { grep -rlZ '/opt/python/cp311-cp311' "$VENV/share" --include='*.cmake' 2>/dev/null || true; } \
    | xargs -0 -r sed -i \
      -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#${npinc}#g" \
      -e "s#/opt/python/cp311-cp311/include/python3.11#${inc}#g"
  echo "$req_hash" > "$VENV/.req_hash"
fi

# 3. message build -----------------------------------------------------------------
# shellcheck source=/dev/null
. "$ROOT/tools/ros_env.sh"
msg_hash="$(hash_of package.xml CMakeLists.txt msg/*.msg srv/*.srv config/*.yaml config/*.xml launch/*.py scripts/* "$VENV/.req_hash")"
if [ "$(cat "$ROOT/.colcon/.msg_hash" 2>/dev/null)" != "$msg_hash" ] \
   || [ ! -f "$ROOT/.colcon/install/rl_traj_ros/share/rl_traj_ros/package.xml" ]; then
  log "building messages with colcon"
  mkdir -p "$ROOT/.colcon"
  ( cd "$ROOT" && "$VENV/bin/colcon" --log-base .colcon/log build \
      --base-paths "$ROOT" --build-base .colcon/build --install-base .colcon/install \
      --cmake-args -DPython3_EXECUTABLE="$VPY" -DBUILD_TESTING=OFF \
      --event-handlers console_cohesion- status- summary- ) > "$ROOT/.colcon/build.log" 2>&1 \
    || { tail -50 "$ROOT/.colcon/build.log" >&2; log "colcon build failed (full log: .colcon/build.log)"; exit 1; }
  echo "$msg_hash" > "$ROOT/.colcon/.msg_hash"
fi
log "ready: source env.sh"
