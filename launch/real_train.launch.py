"""Real-robot RLPD with a human in the loop (franky env, teleop device, policy, collector, writer,
learner), from the demonstrations real_collect recorded.

    ros2 launch rl_traj_ros real_train.launch.py robot_ip:=172.16.0.2 demos_dir:=logs/<run>/demos
    ros2 launch rl_traj_ros real_train.launch.py demos_dir:=... steps:=200 cameras:=front=/image_raw

Reads config/real_train.yaml and starts the same nodes with the same parameters as
`python -m rl_traj_ros.cli run real_train`; the env node is a LifecycleNode driven configure ->
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
from rl_traj_ros.pipelines.real_train import check_config, node_params
from rl_traj_ros.pipelines.run_dir import new_run_dir

ARGS = {
    'config': (os.path.join(get_package_share_directory('rl_traj_ros'), 'config', 'real_train.yaml'),
               'real_train.yaml'),
    'robot_ip': ('', 'override robot_ip'),
    'demos_dir': ('', "the real_collect demos/ directory (required unless the YAML's demos_dir is set)"),
    'steps': ('', "training steps of 10 control steps (empty: the YAML's num_steps; 0: until stopped)"),
    'teleop': ('', "override the device: 'spacemouse' or 'gello'"),
    'gello_port': ('', 'override gello_port'),
    'log_dir': ('', 'override log_dir: runs go to <log_dir>/<timestamp>/'),
    'hid_udp_port': ('', 'SpaceMouse: take raw HID reports from this UDP port (0/empty: the USB device)'),
    'cameras': ('', "NAME=TOPIC[,NAME=TOPIC...]: camera driver topics, main camera first (empty: the YAML's)"),
    'observation': ('', "override observation: 'pixels' (robot states + the cameras: the learner sees them) or "
                        "'state'"),
    'camera_driver': ('', 'also start this driver: realsense2_camera | usb_cam | v4l2_camera | PKG/EXECUTABLE'),
}


def _nodes(context):
    arg = {k: LaunchConfiguration(k).perform(context) for k in ARGS}
    cfg = apply_overrides(yaml.safe_load(open(arg['config'])) or {}, arg['robot_ip'], arg['demos_dir'],
                          arg['log_dir'], arg['gello_port'], None, int(arg['hid_udp_port'] or 0), arg['teleop'],
                          None, arg['cameras'].split(','), arg['camera_driver'])
    if arg['steps']:
        cfg['num_steps'] = int(arg['steps'])
    if arg['observation']:
        cfg['observation'] = arg['observation']
    check_config(cfg)  # refused here, before any node starts, as the CLI refuses
    run_dir = new_run_dir(cfg.get('log_dir', 'logs'))
    from rl_traj_ros.pipelines.sim_train import draw_learning_curve
    env_vars, banner = run_outputs('real_train', run_dir, at_exit=draw_learning_curve)
    params, extra = node_params(cfg, run_dir)
    return [*banner, *real_robot_nodes(params, extra, env_vars)]


def generate_launch_description():
    return LaunchDescription([DeclareLaunchArgument(k, default_value=v, description=d) for k, (v, d) in ARGS.items()]
                             + [OpaqueFunction(function=_nodes)])
