"""The sim launch file, evaluated and run with the real `launch`/`launch_ros` (skipped where
they are not installed; on a ROS 2 workstation they are, see README "Launch files").

Evaluation: the OpaqueFunction runs with a LaunchContext holding the arguments, and each
node's generated parameter file is read back: a launch argument must reach the node it names
(a YAML file's `/**/<node>` section next to a `/**` override used to win over it). Run: a real
LaunchService writes where `output_dir` says."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from rosutil import ROOT

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec('launch') is None or importlib.util.find_spec('launch_ros') is None,
    reason='launch/launch_ros are not installed here (they are on a ROS 2 workstation)')


def load(name):
    spec = importlib.util.spec_from_file_location(name.replace('.', '_'), ROOT / 'launch' / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _ParamsLoader(yaml.SafeLoader):
    """launch_ros writes list parameters as ``!!python/tuple``: read those as lists."""


_ParamsLoader.add_constructor('tag:yaml.org,2002:python/tuple', lambda loader, node: loader.construct_sequence(node))


def evaluate(name, **args):
    """{(namespace, node name): effective parameters} of a launch file for these arguments."""
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    ld = load(name).generate_launch_description()
    ctx = LaunchContext()
    for e in ld.entities:
        if isinstance(e, DeclareLaunchArgument):
            e.execute(ctx)  # defaults
    ctx.launch_configurations.update({k: str(v) for k, v in args.items()})
    out = {}
    for op in (e for e in ld.entities if isinstance(e, OpaqueFunction)):
        for node in op.execute(ctx):
            node._perform_substitutions(ctx)
            params = {}
            for path, is_file in node._Node__expanded_parameter_arguments:
                doc = yaml.load(open(path), Loader=_ParamsLoader) if is_file else path
                for section in doc.values():
                    params.update(section.get('ros__parameters', {}))
            out[(node.expanded_node_namespace, node._Node__node_name)] = params
    return out


def test_sim_launch_arguments_reach_the_nodes_they_name(tmp_path):
    got = evaluate('sim_collect.launch.py', output_dir=tmp_path, policy='mlp', num_env_nodes=2, num_envs=3,
                   episodes=5)
    root = '<node_namespace_unspecified>'
    writer = got[(root, 'replay_buffer_writer_node')]
    policy = got[(root, 'policy_node')]
    collector = got[(root, 'trajectory_collector_node')]
    assert writer['output_dir'] == str(tmp_path / 'replay_buffer')
    assert policy['policy'] == 'mlp' and policy['num_envs'] == 3
    assert collector['env_ranks'] == [0, 1] and collector['num_envs'] == 3 and collector['run_id']
    for rank in (0, 1):
        env = got[(f'/env_{rank}', 'franka_env_node')]
        assert env['env_rank'] == rank and env['num_envs'] == 3 and env['target_successes'] == 3  # ceil(5 / 2)
        assert env['collect_dir'] == str(tmp_path / 'collected_data')
    again = evaluate('sim_collect.launch.py', output_dir=tmp_path)
    assert again[(root, 'trajectory_collector_node')]['run_id'] != collector['run_id']  # every launch is a run


RUN = r'''
import sys
from launch import LaunchDescription, LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
ls = LaunchService(argv=sys.argv[2:])
ls.include_launch_description(IncludeLaunchDescription(PythonLaunchDescriptionSource(sys.argv[1]),
                                                       launch_arguments=[a.split(':=') for a in sys.argv[2:]]))
sys.exit(ls.run())
'''


def test_sim_launch_runs_and_stores_where_output_dir_says(tmp_path):
    out = tmp_path / 'run'
    p = subprocess.Popen([sys.executable, '-c', RUN, str(ROOT / 'launch' / 'sim_collect.launch.py'),
                          f'output_dir:={out}', 'episodes:=1', 'policy:=expert'], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         env={**os.environ, 'MUJOCO_GL': 'egl'})
    index = out / 'replay_buffer' / 'trajectory_index.json'
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and p.poll() is None:
            if index.exists() and json.loads(index.read_text())['trajectory_ids']:
                break
            time.sleep(1)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
        try:
            log, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            log, _ = p.communicate()
    assert index.exists(), log[-3000:]
    entry = next(iter(json.loads(index.read_text())['trajectories'].values()))
    assert entry['identity']['run_id'] and entry['identity']['mode'] == 'rollout'
    assert not (tmp_path / 'outputs').exists()  # nothing went to the YAML's default directory
