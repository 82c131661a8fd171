# `source env.sh` (after tools/setup.sh): the venv, ROS 2 and the built messages, like a
# workspace's setup.bash.  Tools outside the repo: bash -c 'source env.sh && ...'
# shellcheck source=/dev/null
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/tools/ros_env.sh"
