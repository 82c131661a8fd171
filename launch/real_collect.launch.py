"""Real-robot demonstration collection (a human drives the Franka with a SpaceMouse or GELLO).

    ros2 launch rl_traj_ros real_collect.launch.py robot_ip:=172.16.0.2 num_data_episodes:=20
    ros2 launch rl_traj_ros real_collect.launch.py teleop:=gello gello_port:=/dev/ttyUSB0

Reads config/real_collect.yaml (the spec's keys) and starts the same nodes with the same
parameters as `python -m rl_traj_ros.cli run real_collect`.
"""
import os

import yaml
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from rl_traj_ros.pipelines.real_collect import check_config, node_params
from rl_traj_ros.pipelines.run_dir import new_run_dir

ARGS = {
    'config': (os.path.join(get_package_share_directory('rl_traj_ros'), 'config', 'real_collect.yaml'),
               'real_collect.yaml with the spec keys'),
    'robot_ip': ('', 'override robot_ip'),
    'num_data_episodes': ('', 'override num_data_episodes'),
    'teleop': ('', "override the device: 'spacemouse' or 'gello'"),
    'gello_port': ('', 'override gello_port'),
    'demos_dir': ('', 'append to this demos directory'),
}
EXECUTABLES = {'franka_env_node': 'env_0', 'policy_node': None, 'trajectory_collector_node': None,
               'replay_buffer_writer_node': None}


def _nodes(context):
    arg = {k: LaunchConfiguration(k).perform(context) for k in ARGS}
    cfg = yaml.safe_load(open(arg['config'])) or {}
    if arg['teleop']:
        cfg['use_spacemouse'], cfg['use_gello'] = arg['teleop'] == 'spacemouse', arg['teleop'] == 'gello'
    for key in ('robot_ip', 'gello_port', 'demos_dir'):
        if arg[key]:
            cfg[key] = arg[key]
    if arg['num_data_episodes']:
        cfg['num_data_episodes'] = int(arg['num_data_episodes'])
    check_config(cfg)
    params, teleop = node_params(cfg, new_run_dir(cfg.get('log_dir', 'logs')))
    nodes = [Node(package='rl_traj_ros', executable=name, name=name, namespace=ns, parameters=[params[name]],
                  output='screen') for name, ns in EXECUTABLES.items()]
    for name, (module, ros_args) in teleop.items():
        nodes.append(Node(package='rl_traj_ros', executable=module, name=module, output='screen',
                          arguments=['--ros-args', *ros_args]))
    return nodes


def generate_launch_description():
    return LaunchDescription([DeclareLaunchArgument(k, default_value=v, description=d) for k, (v, d) in ARGS.items()]
                             + [OpaqueFunction(function=_nodes)])
