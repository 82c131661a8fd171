# The ROS 2 distribution of this shell's set-up (sourced by setup.sh and, through ros_env.sh, by
# env.sh): RL_TRAJ_ROS_DISTRO, else ROS_DISTRO (what /opt/ros/<distro>/setup.bash exports), else
# jazzy, the LTS. Sets RL_TRAJ_ROS_DISTRO (exported) and _RTR_PY_VERSION, the Python that
# distro's wheels are built for (docs/setup.md says why each). One table here: no other file
# names a distro's Python; setup.sh finds the interpreter (env.sh only needs the name).
export RL_TRAJ_ROS_DISTRO="${RL_TRAJ_ROS_DISTRO:-${ROS_DISTRO:-jazzy}}"
case "$RL_TRAJ_ROS_DISTRO" in
  jazzy)  _RTR_PY_VERSION=3.12 ;;  # Ubuntu 24.04's Python, apt's Jazzy rclpy; LeRobot's minimum
  kilted) _RTR_PY_VERSION=3.11 ;;  # the only Python the Kilted wheels on PyPI are built for
  humble)
    echo "[setup] ROS 2 Humble has no wheels on PyPI: set-up here is jazzy (default) or kilted;" \
         "a Humble workstation: docs/setup.md#humble" >&2
    return 2 2>/dev/null || exit 2 ;;
  *)
    echo "[setup] unknown ROS 2 distro '$RL_TRAJ_ROS_DISTRO' (RL_TRAJ_ROS_DISTRO or ROS_DISTRO):" \
         "jazzy (default) or kilted" >&2
    return 2 2>/dev/null || exit 2 ;;
esac
