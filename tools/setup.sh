#!/usr/bin/env bash
# Idempotent set-up of one ROS 2 distro (RL_TRAJ_ROS_DISTRO, else ROS_DISTRO, else jazzy, the LTS;
# tools/distro.sh): a venv with the distro's pinned wheels + torch + this package's message build.
# Every step is skipped when its inputs did not change, so a second run takes seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=/dev/null
. "$ROOT/tools/distro.sh"
DISTRO="$RL_TRAJ_ROS_DISTRO"
LOCK="requirements-$DISTRO.lock"
log() { printf '[setup] %s\n' "$*" >&2; }
hash_of() { cat "$@" 2>/dev/null | sha256sum | cut -d' ' -f1; }
_RTR_PY="${RL_TRAJ_ROS_PYTHON:-}"
if [ -z "$_RTR_PY" ]; then
  _RTR_PY="$(pyenv root 2>/dev/null || true)/versions"
  _RTR_PY="$(ls -d "$_RTR_PY/$_RTR_PY_VERSION".*/bin/python 2>/dev/null | sort -V | tail -1 || true)"
  [ -x "$_RTR_PY" ] || _RTR_PY="$(command -v "python$_RTR_PY_VERSION" || true)"
fi
[ -x "$_RTR_PY" ] || { log "ROS 2 $DISTRO needs CPython $_RTR_PY_VERSION (python$_RTR_PY_VERSION not found;" \
  "RL_TRAJ_ROS_PYTHON names another interpreter)"; exit 1; }
# The venv must live OUTSIDE the source tree: CMake refuses to export targets whose include
# paths (numpy's, from the venv) lie inside the package's source directory. It is keyed by
# the distro and its lock files, so checkouts with the same pins share one venv; .venv-<distro>
# links to it.
VENV="${RL_TRAJ_ROS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rl_traj_ros/venv-$DISTRO-$(hash_of "$LOCK" requirements.lock | cut -c1-12)}"

# 1. venv -------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv at $VENV ($_RTR_PY, ROS 2 $DISTRO)"
  mkdir -p "$(dirname "$VENV")"
  "$_RTR_PY" -m venv "$VENV"
fi
ln -sfn "$VENV" "$ROOT/.venv-$DISTRO"
VPY="$VENV/bin/python"

# 2. pinned packages ---------------------------------------------------------------
req_hash="$(hash_of "$LOCK" requirements.lock)"
if [ "$(cat "$VENV/.req_hash" 2>/dev/null)" != "$req_hash" ]; then
  log "installing pinned packages ($LOCK)"
  # torch first and by exact version: on CPython 3.11 the machine's local CPU wheel, never a
  # multi-GB CUDA build (PyPI has only CUDA builds for 3.12: docs/setup.md).
  "$VPY" -m pip install -q --disable-pip-version-check "torch==2.13.0" 2> >(grep -v "is ignored: it is neither" >&2)
  "$VPY" -m pip install -q --disable-pip-version-check -r "$LOCK" 2> >(grep -v "is ignored: it is neither" >&2)
  # The wheels' exported CMake targets name the wheel builder's interpreter paths.
  tag="$("$VPY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
  ver="$("$VPY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  inc="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  npinc="$("$VPY" -c 'import numpy; print(numpy.get_include())')"
  # (|| true: a venv repaired before, e.g. one named by RL_TRAJ_ROS_VENV, has nothing left to fix)
  { grep -rlZ "/opt/python/$tag-$tag" "$VENV/share" --include='*.cmake' 2>/dev/null || true; } \
    | xargs -0 -r sed -i \
      -e "s#/opt/python/$tag-$tag/lib/python$ver/site-packages/numpy/_core/include#${npinc}#g" \
      -e "s#/opt/python/$tag-$tag/include/python$ver#${inc}#g"
  echo "$req_hash" > "$VENV/.req_hash"
fi

# 2b. no triton ----------------------------------------------------------------------
# PyPI's torch for CPython 3.12 (Jazzy) is the CUDA build and brings triton, whose bundled LLVM
# cannot share a process with Mesa's llvmpipe (MuJoCo's EGL rendering here): loading libtriton
# after an EGL render segfaults (measured; torch loads it with its first optimizer, and a test
# worker died so in CI). This package never compiles kernels (no torch.compile); torch runs without it.
if "$VPY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("triton") is None)' 2>/dev/null; then
  log "removing triton from the venv (its LLVM breaks EGL rendering; nothing here uses it)"
  "$VPY" -m pip uninstall -q -y triton
fi

# 3. message build -----------------------------------------------------------------
# shellcheck source=/dev/null
. "$ROOT/tools/ros_env.sh"
BUILD="$ROOT/.colcon/$DISTRO"
msg_hash="$(hash_of package.xml CMakeLists.txt msg/*.msg srv/*.srv config/*.yaml config/*.xml launch/*.py scripts/* "$VENV/.req_hash")"
if [ "$(cat "$BUILD/.msg_hash" 2>/dev/null)" != "$msg_hash" ] \
   || [ ! -f "$BUILD/install/rl_traj_ros/share/rl_traj_ros/package.xml" ]; then
  log "building messages with colcon (ROS 2 $DISTRO)"
  # CMake's cache keeps the paths of the venv it was configured with: a new venv starts afresh.
  [ "$(cat "$BUILD/.venv_path" 2>/dev/null)" = "$VENV" ] || rm -rf "$BUILD/build"
  mkdir -p "$BUILD"
  echo "$VENV" > "$BUILD/.venv_path"
  ( cd "$ROOT" && "$VENV/bin/colcon" --log-base "$BUILD/log" build \
      --base-paths "$ROOT" --build-base "$BUILD/build" --install-base "$BUILD/install" \
      --cmake-args -DPython3_EXECUTABLE="$VPY" -DBUILD_TESTING=OFF \
      --event-handlers console_cohesion- status- summary- ) > "$BUILD/build.log" 2>&1 \
    || { tail -50 "$BUILD/build.log" >&2; log "colcon build failed (full log: $BUILD/build.log)"; exit 1; }
  echo "$msg_hash" > "$BUILD/.msg_hash"
fi
log "ready (ROS 2 $DISTRO): source env.sh"
