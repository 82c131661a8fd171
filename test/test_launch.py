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
import torch
import yaml

from rosutil import ROOT, free_udp_port, ros_process
from test_real_collect import franky_sim  # noqa: F401 - the fixture

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
    from launch_ros.actions import Node
    evaluate.nodes = []
    for op in (e for e in ld.entities if isinstance(e, OpaqueFunction)):
        for node in op.execute(ctx):
            if not isinstance(node, Node):
                continue  # event handlers (launch_support.supervise)
            evaluate.nodes.append(node)
            if node.node_package != 'rl_traj_ros':
                continue  # a camera driver: its own parameters
            node._perform_substitutions(ctx)
            params = {}
            for path, is_file in node._Node__expanded_parameter_arguments:
                doc = yaml.load(open(path), Loader=_ParamsLoader) if is_file else path
                for section in doc.values():
                    params.update(section.get('ros__parameters', {}))
            args = [a if isinstance(a, str) else ''.join(x.perform(ctx) for x in a)
                    for a in (node._Node__arguments or [])]
            out[(node.expanded_node_namespace, node._Node__node_name)] = {**params, '_arguments': args}
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
    again = evaluate('sim_collect.launch.py', output_dir=tmp_path, steps=3, image_obs='false', image_storage='video')
    assert again[(root, 'trajectory_collector_node')]['run_id'] != collector['run_id']  # every launch is a run
    env = again[('/env_0', 'franka_env_node')]
    assert env['num_steps'] == 3 and env['target_successes'] == 0 and env['image_obs'] is False
    assert env['image_storage'] == 'video' and got[('/env_0', 'franka_env_node')]['image_storage'] == 'png'
    assert again[(root, 'policy_node')]['policy'] == 'expert' and env['num_envs'] == 2  # the YAML's values


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


def start(name, cwd, *args) -> subprocess.Popen:
    """A launch file under a real LaunchService, in its own process group (a terminal's foreground job)."""
    return subprocess.Popen([sys.executable, '-c', RUN, str(ROOT / 'launch' / name), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, 'MUJOCO_GL': 'egl'})


def interrupt(p: subprocess.Popen, timeout=60) -> str:
    """Ctrl-C (SIGINT to the group), then SIGKILL past ``timeout``: the rest of its output."""
    os.killpg(p.pid, signal.SIGINT)
    try:
        return p.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        return p.communicate()[0]


def launch(name, cwd, *args, timeout=240):
    """Run a launch file with a real LaunchService until it ends by itself: (exit code, log)."""
    p = start(name, cwd, *args)
    try:
        log, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        log = interrupt(p)
        pytest.fail(f'{name} did not end by itself within {timeout} s:\n{log[-3000:]}')
    return p.returncode, log


def test_sim_launch_stores_where_output_dir_says_and_ends_when_done(tmp_path):
    out = tmp_path / 'run'
    t0 = time.monotonic()
    rc, log = launch('sim_collect.launch.py', tmp_path, f'output_dir:={out}', 'episodes:=1', 'policy:=expert')
    took = time.monotonic() - t0
    print(f'\nsim_collect.launch.py ended by itself after {took:.0f} s with exit {rc}')
    assert rc == 0, log[-3000:]
    assert '[drain] everything stored' in log
    assert f'[sim_collect] output: {out.resolve()}' in log  # the absolute directory, as the CLI prints it
    index = json.loads((out / 'replay_buffer' / 'trajectory_index.json').read_text())
    entry = next(iter(index['trajectories'].values()))
    assert entry['identity']['run_id'] and entry['identity']['mode'] == 'rollout'
    assert not (tmp_path / 'outputs').exists()  # nothing went to the YAML's default directory
    assert list((out / 'node_logs').glob('*.log'))  # each node's log with the run, as the CLI keeps them
    # a second launch into the same output_dir: refused before any node starts, as the CLI refuses
    t0 = time.monotonic()
    rc, log = launch('sim_collect.launch.py', tmp_path, f'output_dir:={out}', 'episodes:=1', timeout=60)
    assert rc == 1 and 'a LeRobot dataset already exists in' in log, log[-3000:]
    assert 'process started' not in log and time.monotonic() - t0 < 20, log[-3000:]
    fresh = tmp_path / 'never_written'
    rc, log = launch('sim_collect.launch.py', tmp_path, f'output_dir:={fresh}', 'policy:=nonsense', timeout=120)
    assert rc != 0, log[-3000:]  # a failed launch leaves its nodes' logs and at most the writer's empty buffer
    assert not fresh.exists() or {c.name for c in fresh.iterdir()} <= {'node_logs', 'replay_buffer'}, list(fresh.rglob('*'))
    if (fresh / 'replay_buffer').exists():   # which loads: an interrupted run's buffer is empty, never broken (docs/launch.md)
        from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
        buf = TrajectoryReplayBuffer(sample_window_size=0)
        buf.load_checkpoint(str(fresh / 'replay_buffer'))
        assert len(buf) == 0


def test_real_launch_arguments_reach_the_nodes_they_name(tmp_path):
    got = evaluate('real_collect.launch.py', robot_ip='127.0.0.9', num_data_episodes=3, log_dir=tmp_path / 'logs',
                   hid_udp_port=27123, demos_dir=tmp_path / 'demos', image_storage='png')
    env = got[('/env_0', 'franka_env_node')]
    assert env['robot_ip'] == '127.0.0.9' and env['target_successes'] == 3 and env['require_teleop']
    assert env['image_storage'] == 'png' and env['dataset_naming'] == 'lerobot'  # the YAML says video
    assert env['autostart'] is False  # the launch drives its lifecycle transitions
    assert env['collect_dir'].startswith(str(tmp_path / 'logs'))
    writer = got[('<node_namespace_unspecified>', 'replay_buffer_writer_node')]
    assert writer['output_dir'] == str(tmp_path / 'demos')
    sm = got[('<node_namespace_unspecified>', 'spacemouse_teleop_node')]
    assert 'hid_udp_port:=27123' in sm['_arguments']
    assert env['camera_topics'] == ['']  # no camera unless asked for
    cams = evaluate('real_collect.launch.py', log_dir=tmp_path / 'logs2',
                    cameras='front=/camera/camera/color/image_raw,wrist=/usb_cam/image_raw/compressed',
                    camera_driver='realsense2_camera')
    assert cams[('/env_0', 'franka_env_node')]['camera_topics'] == ['front=/camera/camera/color/image_raw',
                                                                   'wrist=/usb_cam/image_raw/compressed']
    driver = [n for n in evaluate.nodes if getattr(n, 'node_package', None) == 'realsense2_camera']
    assert len(driver) == 1 and driver[0].node_executable == 'realsense2_camera_node'
    for bad, why in (({'camera_driver': 'webcam9000'}, "camera_driver 'webcam9000'"),
                     ({'cameras': '/no/name'}, "camera '/no/name': write NAME=TOPIC")):
        with pytest.raises(ValueError, match=why):
            evaluate('real_collect.launch.py', log_dir=tmp_path / 'logs3', **bad)


def test_real_train_launch_arguments_reach_the_nodes_they_name(tmp_path):
    demos = tmp_path / 'demos'
    demos.mkdir()
    (demos / 'trajectory_index.json').write_text('{}')
    got = evaluate('real_train.launch.py', robot_ip='127.0.0.9', demos_dir=demos, steps=7, log_dir=tmp_path / 'logs',
                   hid_udp_port=27124, cameras='front=/image_raw')
    root = '<node_namespace_unspecified>'
    env, learner, policy = got[('/env_0', 'franka_env_node')], got[(root, 'learner_node')], got[(root, 'policy_node')]
    assert env['robot_ip'] == '127.0.0.9' and env['num_steps'] == 7 and env['require_teleop']
    assert not env['teleop_only'] and env['autostart'] is False and env['camera_topics'] == ['front=/image_raw']
    assert learner['algorithm'] == 'rlpd' and learner['demos_dir'] == str(demos.resolve())
    assert learner['replay_buffer_dir'] == got[(root, 'replay_buffer_writer_node')]['output_dir']
    assert policy['policy'] == 'sac' and policy['max_version_lag'] > 1000  # waits for the learner's first weights
    # the shipped default learns from the cameras given here
    assert env['observation'] == 'pixels' and policy['use_images'] and learner['use_images']
    assert policy['camera_names'] == learner['camera_names'] == ['front'] and learner['image_encoder'] == 'keypoints'
    state = evaluate('real_train.launch.py', robot_ip='127.0.0.9', demos_dir=demos, log_dir=tmp_path / 'logs3',
                     observation='state')
    assert state[('/env_0', 'franka_env_node')]['observation'] == 'state'
    assert not state[(root, 'learner_node')]['use_images']
    assert 'hid_udp_port:=27124' in got[(root, 'spacemouse_teleop_node')]['_arguments']
    with pytest.raises(ValueError, match='demos_dir is required'):
        evaluate('real_train.launch.py', log_dir=tmp_path / 'logs2')
    with pytest.raises(ValueError, match="observation 'pixels' needs cameras"):
        yaml_without_cameras = tmp_path / 'no_cameras.yaml'
        yaml_without_cameras.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / 'config' / 'real_train.yaml')
                                                                         .read_text()), 'cameras': {}}))
        evaluate('real_train.launch.py', config=yaml_without_cameras, demos_dir=demos, log_dir=tmp_path / 'logs4')


def fake_checkpoint(d, state=18, size=64):
    """What the launch files read of a lerobot-train checkpoint (its config.json features), no weights."""
    d.mkdir(parents=True)
    feats = {'observation.state': {'type': 'STATE', 'shape': [state]},
             'observation.images.front': {'type': 'VISUAL', 'shape': [3, size, size]}}
    (d / 'config.json').write_text(json.dumps({'type': 'act', 'input_features': feats}))
    (d / 'model.safetensors').write_bytes(b'')
    return d


def test_sim_collect_launch_lerobot_arguments_reach_the_nodes(tmp_path):
    ck = fake_checkpoint(tmp_path / 'act' / 'checkpoints' / 'last' / 'pretrained_model')
    got = evaluate('sim_collect.launch.py', output_dir=tmp_path / 'out', policy='lerobot',
                   checkpoint=tmp_path / 'act', eval_episodes=7)
    root = '<node_namespace_unspecified>'
    policy, env = got[(root, 'policy_node')], got[('/env_0', 'franka_env_node')]
    assert policy['policy'] == 'lerobot' and policy['checkpoint'] == str((tmp_path / 'act').resolve())
    assert (env['observation'], env['image_size'], env['image_obs']) == ('pixels', 64, True)  # what it was trained on
    assert (env['state_split'], env['target_episodes'], env['only_success']) == ('eval', 7, False)
    assert ck.exists()
    with pytest.raises(ValueError, match="observation must be 'state' or 'pixels'"):
        evaluate('sim_collect.launch.py', output_dir=tmp_path / 'out2', observation='depth')


def test_real_eval_launch_arguments_reach_the_nodes_they_name(tmp_path):
    ck = fake_checkpoint(tmp_path / 'pretrained_model', state=21, size=128)
    got = evaluate('real_eval.launch.py', checkpoint=ck, robot_ip='127.0.0.9', episodes=3, log_dir=tmp_path / 'logs',
                   hid_udp_port=27125, cameras='front=/image_raw')
    root = '<node_namespace_unspecified>'
    env, policy = got[('/env_0', 'franka_env_node')], got[(root, 'policy_node')]
    assert env['robot_ip'] == '127.0.0.9' and env['target_episodes'] == 3 and env['require_teleop']
    assert not env['teleop_only'] and env['autostart'] is False and env['camera_topics'] == ['front=/image_raw']
    assert env['observation'] == 'pixels' and not env['only_success'] and env['collect_episodes']
    assert policy['policy'] == 'lerobot' and policy['checkpoint'] == str(ck.resolve())
    assert policy['camera_names'] == ['front'] and policy['chunk'] == env['chunk'] == 4
    assert 'learner_node' not in {name for _, name in got}
    assert 'hid_udp_port:=27125' in got[(root, 'spacemouse_teleop_node')]['_arguments']
    with pytest.raises(ValueError, match='checkpoint is required'):
        evaluate('real_eval.launch.py', log_dir=tmp_path / 'logs2')


def test_a_terminal_ctrl_c_on_the_sim_launch_ends_every_node_cleanly_and_loses_nothing(tmp_path):
    """Ctrl-C in the terminal of a real LaunchService running sim_collect.launch.py: SIGINT to the
    process group (launch and every node), then launch's own SIGINT to each node. Every node exits 0
    without launch's SIGTERM escalation, the launch exits 0, the buffer loads, and every chunk the env
    executed is stored or listed by the collector as its open step (#38)."""
    import re
    from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
    from test_sim_pipeline import by_identity
    out = tmp_path / 'run'
    p = start('sim_collect.launch.py', tmp_path, f'output_dir:={out}', 'episodes:=100000', 'image_obs:=false')
    lines, deadline = [], time.monotonic() + 180
    for line in p.stdout:   # mid-step: after the env's progress line at 20 chunks (a step is 10 here)
        lines.append(line)
        if 'chunks=20 (' in line or time.monotonic() > deadline:
            break
    t0 = time.monotonic()
    rest = interrupt(p)
    took, log = time.monotonic() - t0, ''.join(lines) + rest
    print(f'\nlaunch exited {p.returncode} {took:.2f} s after the Ctrl-C')
    assert p.returncode == 0 and 'chunks=20 (' in log, log[-3000:]
    assert log.count('process has finished cleanly') == 4, log[-3000:]   # writer, collector, policy, env
    assert 'escalating to' not in log and 'exit code -' not in log and 'Traceback' not in log, log[-3000:]
    buf = TrajectoryReplayBuffer(sample_window_size=0)
    buf.load_checkpoint(str(out / 'replay_buffer'))   # whole: index, metadata and every file
    _, cells = by_identity(out / 'replay_buffer')
    executed = int(re.search(r'done: .*?\bchunks=(\d+)', log).group(1))
    m = re.search(r'(\d+) chunk keys were not stored because', log)
    assert len(cells) == len(set(cells))                                  # nothing twice
    assert executed == len({key for key, _ in cells}) + (int(m.group(1)) if m else 0), log[-3000:]   # none lost


def test_real_launch_fails_before_any_motion_when_the_teleop_device_is_missing(tmp_path):
    """teleop:=gello without a Dynamixel: the GELLO node dies; the launch must end non-zero with
    the reason, and the env node must not have moved the robot (robot unreachable here too:
    either way nothing is sent)."""
    rc, log = launch('real_collect.launch.py', tmp_path, 'teleop:=gello', 'gello_port:=/dev/does-not-exist',
                     'robot_ip:=127.0.0.254', f'log_dir:={tmp_path / "logs"}', timeout=120)
    assert rc == 1, log[-3000:]
    assert 'Caught exception in launch' in log and 'exited with' in log, log[-3000:]
    reason = log.split('Caught exception in launch')[1].splitlines()[0]
    assert 'gello_teleop_node' in reason or 'franka_env_node' in reason, log[-3000:]
    done = [line for line in log.splitlines() if 'done: ' in line]
    assert all('chunks=0 episodes=0' in line for line in done), done  # not a single chunk executed
    assert not list(tmp_path.glob('logs/*/demos/trajectory_*.pt'))
    # the run directory keeps only the nodes' logs (why it failed), no empty data directories
    runs = [p for p in (tmp_path / 'logs').iterdir() if p.name != 'latest']
    assert len(runs) <= 1 and all({c.name for c in r.iterdir()} <= {'node_logs'} for r in runs), runs


@pytest.fixture(scope='module')
def launched_demos(franky_sim, tmp_path_factory):  # noqa: F811
    """real_collect.launch.py against franky-sim with a scripted SpaceMouse operator: (exit code,
    log, log_dir)."""
    tmp_path = tmp_path_factory.mktemp('real_collect_launch')
    port = free_udp_port()
    with ros_process(['test/spacemouse_operator.py', str(port), '0.5', '0.0', '0.3']):
        rc, log = launch('real_collect.launch.py', tmp_path, f'robot_ip:={franky_sim}', 'num_data_episodes:=1',
                         f'log_dir:={tmp_path / "logs"}', f'hid_udp_port:={port}', timeout=300)
    return rc, log, tmp_path / 'logs'


def test_real_launch_drives_the_lifecycle_and_stores_the_demos(launched_demos):
    """The launch configures (connects to franky-sim), activates (motion) and ends by itself
    once a scripted SpaceMouse operator has made the episodes and they are stored."""
    rc, log, logs = launched_demos
    assert rc == 0, log[-3000:]
    configured, activated = log.find('configured: env ready'), log.find('activated: motion enabled')
    assert 0 <= configured < activated, log[-3000:]
    assert '[drain] everything stored' in log, log[-3000:]
    assert list(logs.glob('*/demos/trajectory_*.pt'))
    assert list(logs.glob('*/collected_data/env_0/meta/info.json'))


def test_real_train_launch_learns_from_real_collect_demos_against_franky_sim(franky_sim, launched_demos,  # noqa: F811
                                                                           tmp_path):
    """What a user does: real_collect.launch.py's demos, then real_train.launch.py on the same
    robot with the operator in the loop; the launch drives the env's lifecycle, the learner's
    versions act, every control step is stored once, and it ends by itself after its steps."""
    assert launched_demos[0] == 0, launched_demos[1][-3000:]
    demos = (launched_demos[2] / 'latest' / 'demos').resolve()
    from rl_traj_ros.pipelines.real_train import DEFAULT_CONFIG
    config = tmp_path / 'real_train.yaml'   # bounded staleness so that versions act in a short run (as the CLI test)
    # these demos were recorded without cameras: the state-based learner, and no camera topics to wait for
    config.write_text(yaml.safe_dump({**yaml.safe_load(DEFAULT_CONFIG.read_text()), 'max_version_lag': 2, 'cameras': {}}))
    port = free_udp_port()
    with ros_process(['test/spacemouse_operator.py', str(port), '0.5', '0.0', '0.3']):
        rc, log = launch('real_train.launch.py', tmp_path, f'config:={config}', f'robot_ip:={franky_sim}',
                         f'demos_dir:={demos}', 'steps:=4', f'log_dir:={tmp_path / "logs"}', f'hid_udp_port:={port}',
                         'observation:=state', timeout=300)
    assert rc == 0, log[-3000:]
    assert 0 <= log.find('configured: env ready') < log.find('activated: motion enabled'), log[-3000:]
    run = (tmp_path / 'logs' / 'latest').resolve()
    assert f'[real_train] output: {run}' in log, log[-3000:]
    metrics = [json.loads(x) for x in (run / 'metrics.jsonl').read_text().splitlines()]
    assert metrics and metrics[-1]['demo_rows'] > 0, metrics[-1:]
    from rl_traj_ros.storage.files import load_trajectory
    ids = json.loads((run / 'replay_buffer' / 'trajectory_index.json').read_text())['trajectory_ids']
    rows = [load_trajectory(run / 'replay_buffer' / f'trajectory_{i:08d}.pt', 'pt') for i in ids]
    versions = torch.cat([d['versions'].reshape(-1) for d in rows])
    assert len(versions) == 4 * 10 and int(versions.max()) >= 1   # every step once; the learner's weights acted
    assert (run / 'learner' / 'learner_checkpoint.pt').exists() and (run / 'learning_curve.png').exists()
    assert list((run / 'node_logs').glob('*.log'))


def test_sim_train_launch_trains_and_ends_by_itself(tmp_path):
    got = evaluate('sim_train.launch.py', output_dir=tmp_path / 'eval', steps=2, num_env_nodes=2)
    learner = got[('<node_namespace_unspecified>', 'learner_node')]
    assert learner['num_updates'] == 2 and learner['num_env_nodes'] == 2
    assert learner['tensorboard_dir'] == str(tmp_path / 'eval' / 'tensorboard')
    assert got[('<node_namespace_unspecified>', 'policy_node')]['max_version_lag'] == 0
    ranks = evaluate('sim_train.launch.py', output_dir=tmp_path / 'eval2', steps=2, num_env_nodes=2, num_learners=2)
    assert [ranks[(f'/learner_{k}', 'learner_node')]['actor_rank'] for k in (0, 1)] == [0, 1]
    assert ranks[('<node_namespace_unspecified>', 'trajectory_collector_node')]['num_actors'] == 2
    assert ranks[('/learner_0', 'learner_node')]['dist_init'] == ranks[('/learner_1', 'learner_node')]['dist_init']
    out = tmp_path / 'run'
    rc, log = launch('sim_train.launch.py', tmp_path, f'output_dir:={out}', 'steps:=2')
    assert rc == 0, log[-3000:]
    assert '[drain] everything stored' in log
    lines = [json.loads(x) for x in (out / 'metrics.jsonl').read_text().splitlines()]
    assert [m['version'] for m in lines] == [1, 2]
    # the CLI's outputs: the learning curve and the nodes' logs, the absolute directory printed
    assert (out / 'learning_curve.png').stat().st_size > 0 and list((out / 'node_logs').glob('*.log'))
    assert f'[sim_train] output: {out.resolve()}' in log


def test_sim_train_launch_rlpd_trains_from_the_sim_experts_demos(tmp_path):
    """`sim_train.launch.py algo:=rlpd demos_dir:=...` as the launch file's docstring shows: the
    RLPD config, the SAC actor answering once the learner announced itself, every chunk stored
    once with the version that produced it, versions published, ends by itself after its steps."""
    demos = tmp_path / 'demos'
    subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--config', 'config/sim_demos.yaml',
                    '--episodes', '2', '--output-dir', str(demos), '--in-process'], cwd=ROOT, check=True,
                   capture_output=True, timeout=300)
    out = tmp_path / 'run'
    rc, log = launch('sim_train.launch.py', tmp_path, 'algo:=rlpd', f'demos_dir:={demos / "replay_buffer"}',
                     'steps:=3', f'output_dir:={out}', timeout=300)
    assert rc == 0, log[-3000:]
    assert '[drain] everything stored' in log, log[-3000:]
    metrics = [json.loads(x) for x in (out / 'metrics.jsonl').read_text().splitlines()]
    assert metrics and 'critic_loss' in metrics[-1] and 'temperature' in metrics[-1], metrics[-1:]   # RLPD's
    assert metrics[-1]['demo_rows'] > 0 and metrics[-1]['updates'] > 0, metrics[-1]
    from rl_traj_ros.storage.files import load_trajectory
    ids = json.loads((out / 'replay_buffer' / 'trajectory_index.json').read_text())['trajectory_ids']
    rows = [load_trajectory(out / 'replay_buffer' / f'trajectory_{i:08d}.pt', 'pt') for i in ids]
    assert sum(d['actions'].shape[0] for d in rows) == 3 * 10 * 2   # a row per chunk and env: steps x L x envs
    assert all('curr_obs/states' in d and 'next_obs/states' in d for d in rows)   # whole transitions
    assert (out / 'learning_curve.png').stat().st_size > 0
