"""Real-robot demonstration collection (a human drives the Franka with a SpaceMouse or GELLO).

    ros2 launch rl_traj_ros real_collect.launch.py robot_ip:=172.16.0.2 num_data_episodes:=20
    ros2 launch rl_traj_ros real_collect.launch.py teleop:=gello gello_port:=/dev/ttyUSB0
    ros2 launch rl_traj_ros real_collect.launch.py robot_ip:=172.16.0.2 \
        cameras:=front=/camera/camera/color/image_raw camera_driver:=realsense2_camera

Reads config/real_collect.yaml (the spec's keys) and starts the same nodes with the same
parameters as `python -m rl_traj_ros.cli run real_collect`.
"""
import os

import yaml
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from rl_traj_ros.pipelines.launch_support import real_robot_nodes, run_outputs
from rl_traj_ros.pipelines.real_collect import apply_overrides, check_config, node_params
from rl_traj_ros.pipelines.run_dir import new_run_dir

ARGS = {
    'config': (os.path.join(get_package_share_directory('rl_traj_ros'), 'config', 'real_collect.yaml'),
               'real_collect.yaml with the spec keys'),
    'robot_ip': ('', 'override robot_ip'),
    'num_data_episodes': ('', 'override num_data_episodes'),
    'teleop': ('', "override the device: 'spacemouse' or 'gello'"),
    'gello_port': ('', 'override gello_port'),
    'demos_dir': ('', 'append to this demos directory'),
    'log_dir': ('', 'override log_dir: runs go to <log_dir>/<timestamp>/'),
    'hid_udp_port': ('', 'SpaceMouse: take raw HID reports from this UDP port (0/empty: the USB device)'),
    'image_storage': ('', "'png' or 'video': how the LeRobot dataset stores camera streams (empty: the YAML's)"),
    'cameras': ('', "NAME=TOPIC[,NAME=TOPIC...]: camera driver topics, main camera first ('.../compressed': "
                    "CompressedImage); replaces the YAML's cameras"),
    'camera_driver': ('', 'also start this driver: realsense2_camera | usb_cam | v4l2_camera | PKG/EXECUTABLE'),
}


def _nodes(context):
    arg = {k: LaunchConfiguration(k).perform(context) for k in ARGS}
    cfg = apply_overrides(yaml.safe_load(open(arg['config'])) or {}, arg['robot_ip'], arg['demos_dir'],
                          arg['log_dir'], arg['gello_port'], arg['num_data_episodes'] or None,
                          int(arg['hid_udp_port'] or 0), arg['teleop'], arg['image_storage'],
                          arg['cameras'].split(','), arg['camera_driver'])
    check_config(cfg)  # refused here, before any node starts, as the CLI refuses
    run_dir = new_run_dir(cfg.get('log_dir', 'logs'))
    # node_logs/, the absolute run directory; when `ros2 launch` exits a run that recorded nothing is removed
    env_vars, banner = run_outputs('real_collect', run_dir)
    params, extra = node_params(cfg, run_dir)
    # exit 0 once the demos are stored; exit 1 when the teleop device, a camera, the robot or a node
    # fails (the env node itself never moves the robot without a teleop device: require_teleop)
    return [*banner, *real_robot_nodes(params, extra, env_vars)]


def generate_launch_description():
    return LaunchDescription([DeclareLaunchArgument(k, default_value=v, description=d) for k, (v, d) in ARGS.items()]
                             + [OpaqueFunction(function=_nodes)])
