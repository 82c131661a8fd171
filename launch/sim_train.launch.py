"""Sim training: the sim collection nodes plus the learner node (PPO or RLPD), closing the loop.

    ros2 launch rl_traj_ros sim_train.launch.py steps:=20 num_env_nodes:=1 output_dir:=/data/train1
    ros2 launch rl_traj_ros sim_train.launch.py config:=<share>/config/sim_train_reach.yaml num_learners:=2
    ros2 launch rl_traj_ros sim_train.launch.py algo:=rlpd demos_dir:=/data/demos20/replay_buffer steps:=200

Same nodes and the same config/sim_train.yaml as `python -m rl_traj_ros.cli run sim_train`; ends
by itself: exit 0 once the env nodes and the learner are done and the writer stored everything,
exit 1 with the reason when a node fails.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

ARGS = {
    'config': ('', "params file of every node (empty: the package's config/sim_train.yaml, or sim_train_rlpd.yaml "
                   'with algo:=rlpd)'),
    'algo': ('', "the learner: 'ppo' or 'rlpd' (empty: the config's)"),
    'demos_dir': ('', 'rlpd: the demonstrations (a demos/ or replay_buffer/ directory)'),
    'num_env_nodes': ('1', 'env nodes (env_rank 0..N-1), each in namespace env_<rank>'),
    'steps': ('', "training steps = PPO updates (empty: the YAML's num_steps)"),
    'num_learners': ('1', 'learner ranks (namespace learner_<rank>; the collector routes each its rows, '
                          'gradients all-reduced with torch.distributed gloo)'),
    'output_dir': ('', 'replay buffer, metrics, TensorBoard, checkpoint go here '
                       '(default: outputs/sim_train/<timestamp>/, new every run)'),
}


def _nodes(context):
    """The CLI's effective parameters (``sim_train.train_params``), one dict per node."""
    from rl_traj_ros.pipelines.launch_support import identify, run_outputs, supervise
    from rl_traj_ros.pipelines.sim_train import DEFAULT_OUTPUT_ROOT, draw_learning_curve, train_params
    arg = {k: LaunchConfiguration(k).perform(context) for k in ARGS}
    share = os.path.join(get_package_share_directory('rl_traj_ros'), 'config')
    arg['config'] = arg['config'] or os.path.join(share, 'sim_train_rlpd.yaml' if arg['algo'] == 'rlpd'
                                                  else 'sim_train.yaml')
    if not arg['output_dir']:
        from rl_traj_ros.pipelines.run_dir import new_run_dir
        arg['output_dir'] = str(new_run_dir(DEFAULT_OUTPUT_ROOT))
    n_env = int(arg['num_env_nodes'])
    ranks = int(arg['num_learners'])
    params = train_params(arg['config'], n_env, arg['output_dir'], int(arg['steps']) if arg['steps'] else None,
                          ranks, algo=arg['algo'] or None, demos=arg['demos_dir'] or None)
    run_id = identify(params)  # one run id and secret for its nodes: another run in the domain is kept out
    # like the CLI: node_logs/, the absolute output directory, learning_curve.png when ros2 launch ends
    env, banner = run_outputs('sim_train', arg['output_dir'], at_exit=draw_learning_curve)
    services = [Node(package='rl_traj_ros', executable=name, name=name, parameters=[params[name]], output='screen',
                     additional_env=env) for name in ('replay_buffer_writer_node', 'trajectory_collector_node',
                                                      'policy_node')]
    learners = [Node(package='rl_traj_ros', executable='learner_node', name='learner_node',
                     **({'namespace': f'learner_{k}'} if ranks > 1 else {}), additional_env=env,
                     parameters=[{**params['learner_node'], 'actor_rank': k}], output='screen') for k in range(ranks)]
    envs = [Node(package='rl_traj_ros', executable='franka_env_node', name='franka_env_node', namespace=f'env_{rank}',
                 parameters=[{**params['franka_env_node'], 'env_rank': rank}], output='screen', additional_env=env)
            for rank in range(n_env)]
    if params['learner_node'].get('algorithm') == 'rlpd':  # trains until stopped: done with the env nodes
        return banner + services + learners + envs + supervise(envs, services + learners, run_id)
    # the job is done when the env nodes and the learners (after their last update) exited 0
    return banner + services + learners + envs + supervise(envs + learners, services, run_id)


def generate_launch_description():
    return LaunchDescription([DeclareLaunchArgument(k, default_value=v, description=d) for k, (v, d) in ARGS.items()]
                             + [OpaqueFunction(function=_nodes)])
