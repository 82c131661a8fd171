# Environment of the venv's ROS 2 wheels and of this package's build (sourced, not run), for
# the distro of tools/distro.sh (RL_TRAJ_ROS_DISTRO, else ROS_DISTRO, else jazzy).
_RTR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=/dev/null
. "$_RTR_ROOT/tools/distro.sh" || return
if [ ! -e "$_RTR_ROOT/.venv-$RL_TRAJ_ROS_DISTRO" ]; then
  echo "[env] ROS 2 $RL_TRAJ_ROS_DISTRO is not set up here: RL_TRAJ_ROS_DISTRO=$RL_TRAJ_ROS_DISTRO bash tools/setup.sh" >&2
  return 1
fi
_RTR_VENV="$(readlink -f "$_RTR_ROOT/.venv-$RL_TRAJ_ROS_DISTRO")"
_RTR_SITE="$(cd "$_RTR_VENV" && ls -d lib/python3.*/site-packages | head -1)"  # the venv's own Python
_RTR_INSTALL="$_RTR_ROOT/.colcon/$RL_TRAJ_ROS_DISTRO/install/rl_traj_ros"
_rtr_prepend() { case ":${!1:-}:" in *":$2:"*) ;; *) export "$1=$2${!1:+:${!1}}";; esac; }
export ROS_DISTRO="$RL_TRAJ_ROS_DISTRO"
export VIRTUAL_ENV="$_RTR_VENV"
_rtr_prepend PATH "$_RTR_VENV/bin"
_rtr_prepend AMENT_PREFIX_PATH "$_RTR_VENV"
_rtr_prepend CMAKE_PREFIX_PATH "$_RTR_VENV"
for _d in "$_RTR_VENV/$_RTR_SITE"/ros_*.libs; do
  [ -d "$_d" ] && _rtr_prepend LD_LIBRARY_PATH "$_d"
done
_rtr_prepend LD_LIBRARY_PATH "$_RTR_VENV/lib"
if [ -d "$_RTR_INSTALL" ]; then
  _rtr_prepend AMENT_PREFIX_PATH "$_RTR_INSTALL"
  _rtr_prepend CMAKE_PREFIX_PATH "$_RTR_INSTALL"
  _rtr_prepend LD_LIBRARY_PATH "$_RTR_INSTALL/lib"
  _rtr_prepend PYTHONPATH "$_RTR_INSTALL/$_RTR_SITE"
fi
# Source tree first: edits need no rebuild; rl_traj_ros/__init__.py extends its __path__
# to the installed generated modules (rl_traj_ros.msg / .srv).
_rtr_prepend PYTHONPATH "$_RTR_ROOT"
# LD_LIBRARY_PATH is complete, so the wheels' .pth need not re-exec the interpreter.
export _ROS_WHEELS_BOOTSTRAP_COMPLETE=1
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
unset _d
