"""A LeRobot checkpoint on the real robot, the operator able to take over (franky env, teleop
device, policy 'lerobot', collector, writer; every episode recorded).

    ros2 launch rl_traj_ros real_eval.launch.py checkpoint:=outputs/train/act/checkpoints/last/pretrained_model \
        robot_ip:=172.16.0.2 cameras:=front=/camera/camera/color/image_raw episodes:=10

Reads config/real_eval.yaml and starts the same nodes with the same parameters as
`python -m rl_traj_ros.cli run real_eval`; the env node is a LifecycleNode driven configure ->
activate, as in real_collect.launch.py.
"""
import os

import yaml
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from rl_traj_ros.pipelines.launch_support import real_robot_nodes, run_outputs
from rl_traj_ros.pipelines.real_collect import apply_overrides
from rl_traj_ros.pipelines.real_eval import check_config, node_params
from rl_traj_ros.pipelines.run_dir import new_run_dir

ARGS = {
    'config': (os.path.join(get_package_share_directory('rl_traj_ros'), 'config', 'real_eval.yaml'),
               'real_eval.yaml'),
    'checkpoint': ('', "lerobot-train's .../checkpoints/<N>/pretrained_model (required unless the YAML's is set)"),
    'robot_ip': ('', 'override robot_ip'),
    'episodes': ('', "episodes to run (empty: the YAML's num_episodes)"),
    'teleop': ('', "override the device: 'spacemouse' or 'gello'"),
    'gello_port': ('', 'override gello_port'),
    'log_dir': ('', 'override log_dir: runs go to <log_dir>/<timestamp>/'),
    'hid_udp_port': ('', 'SpaceMouse: take raw HID reports from this UDP port (0/empty: the USB device)'),
    'cameras': ('', 'NAME=TOPIC[,NAME=TOPIC...]: camera driver topics, named as in the training dataset'),
    'camera_driver': ('', 'also start this driver: realsense2_camera | usb_cam | v4l2_camera | PKG/EXECUTABLE'),
}


def _nodes(context):
    arg = {k: LaunchConfiguration(k).perform(context) for k in ARGS}
    cfg = apply_overrides(yaml.safe_load(open(arg['config'])) or {}, arg['robot_ip'], None, arg['log_dir'],
                          arg['gello_port'], None, int(arg['hid_udp_port'] or 0), arg['teleop'], None,
                          arg['cameras'].split(','), arg['camera_driver'])
    if arg['checkpoint']:
        cfg['checkpoint'] = arg['checkpoint']
    if arg['episodes']:
        cfg['num_episodes'] = int(arg['episodes'])
    check_config(cfg)  # refused here, before any node starts, as the CLI refuses
    run_dir = new_run_dir(cfg.get('log_dir', 'logs'))
    env_vars, banner = run_outputs('real_eval', run_dir)
    params, extra = node_params(cfg, run_dir)
    return [*banner, *real_robot_nodes(params, extra, env_vars)]


def generate_launch_description():
    return LaunchDescription([DeclareLaunchArgument(k, default_value=v, description=d) for k, (v, d) in ARGS.items()]
                             + [OpaqueFunction(function=_nodes)])
