#!/usr/bin/env bash
# The real lerobot 0.6.1 (needs Python >= 3.12) in its own venv, for the opt-in acceptance
# check of the datasets we write (our writer itself never imports lerobot): dataset loading,
# lerobot-train and lerobot-dataset-viz. ~2.2 GB download.
set -euo pipefail
VENV="${RL_TRAJ_ROS_LEROBOT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rl_traj_ros/venv-lerobot-0.6.1}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import lerobot.datasets, accelerate, rerun, diffusers' 2>/dev/null; then
  PY312="$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python"
  [ -x "$PY312" ] || PY312="$(command -v python3.12)"
  echo "[lerobot] creating $VENV with $PY312" >&2
  "$PY312" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "lerobot[dataset,training,viz,diffusion]==0.6.1" 2> >(grep -v "is ignored: it is neither" >&2)
fi
echo "$VENV"
