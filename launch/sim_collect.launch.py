"""Sim collection pipeline: env node(s), policy, trajectory collector, replay-buffer writer.

    ros2 launch rl_traj_ros sim_collect.launch.py num_env_nodes:=2 num_envs:=4 episodes:=20 \
        output_dir:=/data/run1 policy:=expert
    ros2 launch rl_traj_ros sim_collect.launch.py policy:=lerobot checkpoint:=outputs/train/act/.../pretrained_model

Same nodes and the same config/sim_collect.yaml as `python -m rl_traj_ros.cli run sim_collect`,
and like it the launch ends by itself: exit 0 once the env nodes are done and the writer stored
everything, exit 1 with the reason when a node fails.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

ARGS = {
    'config': (os.path.join(get_package_share_directory('rl_traj_ros'), 'config', 'sim_collect.yaml'),
               'params file of every node'),
    'num_env_nodes': ('1', 'env nodes (env_rank 0..N-1), each in namespace env_<rank>'),
    'num_envs': ('', "parallel envs per env node (empty: the YAML's num_envs)"),
    'episodes': ('', "successful episodes to collect in total (empty: the YAML's target_successes per env node)"),
    'output_dir': ('', 'replay buffer and collected datasets go here '
                       '(default: outputs/sim_collect/<timestamp>/, new every run)'),
    'policy': ('', "'expert' (scripted), 'mlp' or 'lerobot' (with checkpoint; empty: the YAML's policy)"),
    'checkpoint': ('', "policy lerobot: lerobot-train's .../checkpoints/<N>/pretrained_model, evaluated on held-out "
                       'state ids'),
    'observation': ('', "'state' or 'pixels' (proprioception + cameras, no cube position); empty: the YAML's, "
                        "or with policy lerobot what the checkpoint was trained on"),
    'eval_episodes': ('', 'policy lerobot: episodes to score (empty: 20)'),
    'steps': ('', 'training steps per env node (a cap; alone: run exactly this many, no success target)'),
    'image_obs': ('', "'true'/'false': render the two cameras (empty: the YAML's image_obs)"),
    'image_storage': ('', "'png' or 'video': how the LeRobot dataset stores camera streams (empty: the YAML's)"),
}


def _nodes(context):
    """The CLI's effective parameters (``load_params`` + ``apply_overrides``), given to each node
    as its own dict: a YAML file next to a ``/**`` override would let the file's
    ``/**/<node>`` sections win over the launch arguments."""
    from rl_traj_ros.pipelines.sim_collect import DEFAULT_OUTPUT_ROOT, apply_overrides, load_params
    from rl_traj_ros.pipelines.run_dir import existing_datasets, new_run_dir
    arg = {k: LaunchConfiguration(k).perform(context) for k in ARGS}
    if arg['output_dir']:  # the CLI's refusal, before any node starts
        taken = existing_datasets(os.path.join(arg['output_dir'], 'collected_data'))
        if taken:
            raise ValueError(f'a LeRobot dataset already exists in {", ".join(map(str, taken))}; choose a new '
                             f'output_dir (or leave it out: every run gets {DEFAULT_OUTPUT_ROOT}/<timestamp>/)')
    else:
        arg['output_dir'] = str(new_run_dir(DEFAULT_OUTPUT_ROOT))
    n_env = int(arg['num_env_nodes'])
    if arg['image_obs'] not in ('', 'true', 'false', 'True', 'False'):
        raise ValueError(f"image_obs must be 'true' or 'false', got {arg['image_obs']!r}")
    if arg['image_storage'] not in ('', 'png', 'video'):
        raise ValueError(f"image_storage must be 'png' or 'video', got {arg['image_storage']!r}")
    if arg['observation'] not in ('', 'state', 'pixels'):
        raise ValueError(f"observation must be 'state' or 'pixels', got {arg['observation']!r}")
    def number(k):
        return int(arg[k]) if arg[k] else None
    # the CLI's overrides, one by one: an empty argument keeps the YAML's value
    params = apply_overrides(load_params(arg['config']), n_env, num_envs=number('num_envs'),
                             episodes=number('episodes'), output_dir=arg['output_dir'], policy=arg['policy'] or None,
                             image_obs=None if not arg['image_obs'] else arg['image_obs'].lower() == 'true',
                             steps=number('steps'), image_storage=arg['image_storage'] or None,
                             checkpoint=arg['checkpoint'] or None, observation=arg['observation'] or None,
                             eval_episodes=number('eval_episodes'))
    from rl_traj_ros.pipelines.launch_support import identify, run_outputs, supervise
    run_id = identify(params)  # one run id and secret for its nodes: another run in the domain is kept out
    env, banner = run_outputs('sim_collect', arg['output_dir'])
    services = [Node(package='rl_traj_ros', executable=name, name=name, parameters=[params[name]], output='screen',
                     additional_env=env) for name in ('replay_buffer_writer_node', 'trajectory_collector_node',
                                                      'policy_node')]
    envs = [Node(package='rl_traj_ros', executable='franka_env_node', name='franka_env_node', namespace=f'env_{rank}',
                 parameters=[{**params['franka_env_node'], 'env_rank': rank}], output='screen', additional_env=env)
            for rank in range(n_env)]
    # ends with exit 0 once the env nodes are done and everything is stored; 1 if a node fails
    return banner + services + envs + supervise(envs, services, run_id)


def generate_launch_description():
    return LaunchDescription([DeclareLaunchArgument(k, default_value=v, description=d) for k, (v, d) in ARGS.items()]
                             + [OpaqueFunction(function=_nodes)])
