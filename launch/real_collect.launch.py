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
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition

from rl_traj_ros.pipelines.launch_support import run_outputs, supervise
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
EXECUTABLES = {'franka_env_node': 'env_0', 'policy_node': None, 'trajectory_collector_node': None,
               'replay_buffer_writer_node': None}


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
    nodes = {name: Node(package='rl_traj_ros', executable=name, name=name, namespace=ns, parameters=[params[name]],
                        output='screen', additional_env=env_vars)
             for name, ns in EXECUTABLES.items() if name != 'franka_env_node'}
    teleops = []  # the teleop device and, when asked for, the camera driver: required nodes
    for module, ros_args in extra.values():
        package, executable = module.split('/', 1) if '/' in module else ('rl_traj_ros', module)
        teleops.append(Node(package=package, executable=executable, output='screen', additional_env=env_vars,
                            arguments=['--ros-args', *ros_args], **({'name': module} if '/' not in module else {})))
    # the robot's node is managed: configure (connect to the robot) then activate (motion
    # enabled); an unreachable robot fails configure and the node exits 1, nothing moved
    env = LifecycleNode(package='rl_traj_ros', executable='franka_env_node', name='franka_env_node',
                        namespace=EXECUTABLES['franka_env_node'],
                        parameters=[{**params['franka_env_node'], 'autostart': False}], output='screen',
                        additional_env=env_vars)
    lifecycle = [
        RegisterEventHandler(OnStateTransition(target_lifecycle_node=env, goal_state='inactive', entities=[
            EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(env),
                                        transition_id=Transition.TRANSITION_ACTIVATE))])),
        EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(env),
                                    transition_id=Transition.TRANSITION_CONFIGURE)),
    ]
    # exit 0 once the demos are stored; exit 1 when the teleop device, the robot or a node fails
    # (the env node itself never moves the robot without a teleop device: require_teleop)
    return [*banner, *nodes.values(), *teleops, env, *lifecycle, *supervise([env], [*nodes.values(), *teleops])]


def generate_launch_description():
    return LaunchDescription([DeclareLaunchArgument(k, default_value=v, description=d) for k, (v, d) in ARGS.items()]
                             + [OpaqueFunction(function=_nodes)])
