"""Real-robot collection against franky-sim (the libfranka protocol, MuJoCo FR3 + Franka Hand):
the franky env's motions, state, gripper and limits; then the whole real_collect pipeline with
a scripted operator on a virtual SpaceMouse; a second run appends to the demos."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip('franky')
pytest.importorskip('franky_sim')

from lerobot_tools import needs_lerobot, train_tiny_act  # noqa: E402
from rosutil import (ROOT, free_udp_port, owns_socket, ros_process, scripted_cell, stop_process,  # noqa: E402
                     tcp_listener_inode)

def _free_host() -> str:
    """A loopback address where nothing listens on TCP 1337 yet: two franky-sims on one address
    would drive each other's robot (another test run on this machine, another module)."""
    for k in range(100):
        host = '127.0.0.%d' % (40 + (os.getpid() + k) % 200)
        if tcp_listener_inode(host, 1337) is None and tcp_listener_inode(host, 1338) is None:
            return host
    raise RuntimeError('no free 127.0.0.N for franky-sim')


@pytest.fixture(scope='module')
def franky_sim(tmp_path_factory):
    """franky-sim on its own address, verified to be the process answering there. Its output goes
    to a file under the test's tmp directory (read when it did not start; kept to diagnose a stalled
    motion: a pipe nobody reads would also block it once full)."""
    host = _free_host()
    exe = Path(sys.executable).with_name('franky-sim')
    log = tmp_path_factory.mktemp('franky_sim') / 'franky_sim.log'
    p = subprocess.Popen([str(exe), '-s', 'mujoco', '--hostname', host], stdout=open(log, 'w'),
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline and p.poll() is None:
        inode = tcp_listener_inode(host, 1337)
        if inode is not None:
            if not owns_socket(p.pid, inode):
                stop_process(p)
                pytest.fail(f'another process listens on {host}:1337, not the franky-sim this test started')
            break
        time.sleep(0.2)
    else:
        out = log.read_text()
        stop_process(p)
        pytest.fail(f'franky-sim did not start on {host}: {out[-2000:]}')
    yield host
    stop_process(p)


def test_franky_env_motions_state_gripper_and_limits(franky_sim):
    from rl_traj_ros.envs.franky_env import FrankaFrankyEnv
    env = FrankaFrankyEnv(franky_sim, target_ee_pose=(0.6, 0.05, 0.45), success_hold_steps=2)
    try:
        obs, _ = env.reset()
        s = obs['states']
        assert np.allclose(s[:3], [0.554, 0.0, 0.521], atol=0.01)  # home TCP
        assert np.allclose(s[13:20], [0, 0, 0, -1.57, 0, 1.57, 0.785], atol=0.01)  # home joints
        assert s[20] == pytest.approx(0.08, abs=0.01)  # gripper open
        # limits are applied before anything is sent
        target, drot = env.clip_target(np.array([0.69, 0.0, 0.3]), np.array([1, 1, 1, 1, 0, 0]))
        assert np.all(target <= env.ws_max + 1e-9) and np.linalg.norm(target - [0.69, 0, 0.3]) <= 0.03 + 1e-9
        assert np.linalg.norm(drot) <= env.max_step_rad + 1e-9
        done = False
        for i in range(40):
            err = (np.array([0.6, 0.05, 0.45]) - obs['states'][:3]) / 0.05
            obs, r, done, trunc, info = env.step(np.concatenate([np.clip(err, -1, 1), [0, 0, 0], [1.0]]))
            if done:
                break
        assert done and r == 1.0 and info['succeed'] and info['pos_error'] < 0.02
        deadline = time.monotonic() + 10  # the gripper closes (binary command >= 0.5), however loaded the machine
        while env._obs()['states'][20] >= 0.03 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert env._obs()['states'][20] < 0.03
        with pytest.raises(ValueError, match='6 dims, expected 7'):
            env.step(np.zeros(6))
    finally:
        env.close()


def test_a_policy_toggling_the_gripper_every_step_never_hangs_the_env(franky_sim):
    """A learning policy's gripper command flips around 0.5 from one control step to the next: a
    gripper command sent while the last one was in flight blocked franky for good (franky-sim never
    answered either), hanging real_train's env node "moving home" for minutes. Now a command waits
    for the one in flight (a later step sends it) and the reset's waits are bounded."""
    import threading
    from rl_traj_ros.envs.franky_env import FrankaFrankyEnv
    env = FrankaFrankyEnv(franky_sim, max_episode_steps=4)
    episodes = []

    def run():
        for ep in range(6):
            env.reset()
            for t in range(4):
                env.step(np.array([0.3, -0.3, 0.2, 0, 0, 0, float(t % 2)], np.float32))
            episodes.append(ep)
    worker = threading.Thread(target=run, daemon=True)
    try:
        worker.start()
        worker.join(120)
        assert episodes == list(range(6)), f'stuck after episodes {episodes}'  # before the fix: inside episode 0
    finally:
        if not worker.is_alive():
            env.close()


def _demo_ids(demos):
    return json.loads((demos / 'trajectory_index.json').read_text())['trajectory_ids']


@pytest.fixture(scope='module')
def collected(franky_sim, tmp_path_factory):
    """The README's real_collect, twice into one demos directory, with two camera driver topics
    (the stand-in: a raw rgb8 one and a JPEG one) and the scripted SpaceMouse operator."""
    tmp_path = tmp_path_factory.mktemp('real_collect')
    port = free_udp_port()
    demos = tmp_path / 'demos'
    # the stand-ins are Python processes on a loaded 2-core machine: a frame gap of 0.2 s happens, which
    # the shipped 0.1 s tolerance rightly refuses; a real driver does not pause like that
    import yaml
    from rl_traj_ros.pipelines.real_collect import DEFAULT_CONFIG
    config = tmp_path / 'real_collect.yaml'
    config.write_text(yaml.safe_dump({**yaml.safe_load(DEFAULT_CONFIG.read_text()), 'camera_sync_tolerance_s': 0.3}))
    cmd = [sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'real_collect', '--config', str(config), '--robot-ip',
           franky_sim,
           '--episodes', '1', '--log-dir', str(tmp_path / 'logs'), '--demos-dir', str(demos),
           '--hid-udp-port', str(port), '--camera', 'front=/rc_cam/front/image_raw',
           '--camera', 'wrist=/rc_cam/wrist/image_raw/compressed', '--quiet']
    # the operator drives to config/real_collect.yaml's target_ee_pose
    with scripted_cell(port, (0.5, 0.0, 0.3), [('/rc_cam/front/image_raw', []),
                                               ('/rc_cam/wrist/image_raw/compressed', ['--rate', '15'])]):
        counts = []
        for run in (1, 2):
            out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
            counts.append(len(_demo_ids(demos)))
    return tmp_path, counts


def test_real_collect_with_scripted_spacemouse_operator_and_cameras_appends(collected):
    """Demos with main_images and extra_view_images whose pixels are the stamped frames, a
    LeRobot dataset with both cameras as video, robot_type fr3, the interventions flagged."""
    import camera_standin as standin
    tmp_path, counts = collected
    demos = tmp_path / 'demos'
    assert counts == [1, 2]  # a second run appends, never overwrites
    from rl_traj_ros.storage.files import load_trajectory
    for tid in _demo_ids(demos):
        d = load_trajectory(demos / f'trajectory_{tid:08d}.pt', 'pt')
        assert bool(d['intervene_flags'].all())  # every executed action was the operator's
        assert float(d['rewards'].max()) >= 0.5  # successful episodes only
        # whole transitions, what RLPD learns from (the data-collection document's demo format)
        from rl_traj_ros.learning.transitions import check_rows
        check_rows(d, 'real_collect demos')
        t = d['actions'].shape[0]
        assert {k: tuple(d[k].shape) for k in ('curr_obs/states', 'next_obs/states', 'actions', 'rewards', 'dones',
                                               'terminations', 'truncations', 'curr_obs/main_images',
                                               'next_obs/main_images', 'curr_obs/extra_view_images')} == {
            'curr_obs/states': (t, 21), 'next_obs/states': (t, 21), 'actions': (t, 7), 'rewards': (t, 1),
            'dones': (t, 1), 'terminations': (t, 1), 'truncations': (t, 1), 'curr_obs/main_images': (t, 128, 128, 3),
            'next_obs/main_images': (t, 128, 128, 3), 'curr_obs/extra_view_images': (t, 1, 128, 128, 3)}
        assert d['curr_obs/main_images'].dtype == torch.uint8
        assert torch.equal(d['curr_obs/states'][1:], d['next_obs/states'][:-1]) and bool(d['terminations'][-1].all())
        assert torch.equal(d['curr_obs/main_images'][1:], d['next_obs/main_images'][:-1])
        # the pixels are the driver's frames: each step took a newer frame, about control_dt (0.1 s) apart
        for key in ('curr_obs/main_images', 'curr_obs/extra_view_images'):
            imgs = d[key].numpy().reshape(t, -1, 128, 128, 3)[:, 0]
            stamps = np.array([standin.decode(im)['stamp_s'] for im in imgs])
            assert all(standin.decode(im)['rgb_order'] for im in imgs)
            steps = np.diff(stamps)
            assert (steps > 0).all() and 0.05 < float(np.median(steps)) < 0.5, (key, steps)
    runs = sorted(p for p in (tmp_path / 'logs').iterdir() if not p.is_symlink())
    assert len(runs) == 2 and (tmp_path / 'logs' / 'latest').resolve() == runs[-1].resolve()
    import pyarrow.parquet as pq
    for r in runs:
        root = r / 'collected_data' / 'env_0'
        info = json.loads((root / 'meta' / 'info.json').read_text())
        assert info['total_episodes'] == 1 and info['codebase_version'] == 'v3.0' and info['robot_type'] == 'fr3'
        # LeRobot naming, with franky's joint names and the TCP fields named
        from rl_traj_ros.envs.franky_env import ACTION_NAMES, STATE_NAMES
        feats = info['features']
        assert feats['observation.state']['names'] == STATE_NAMES and 'fr3_joint7.pos' in STATE_NAMES
        assert feats['action']['names'] == ACTION_NAMES and STATE_NAMES[:3] == ['tcp.x', 'tcp.y', 'tcp.z']
        assert {'next.reward', 'next.done', 'next.success'} <= set(feats)
        for cam in ('front', 'wrist'):  # both cameras, as video (the default), main camera first
            assert feats[f'observation.images.{cam}']['dtype'] == 'video'
            assert feats[f'observation.images.{cam}']['shape'] == [128, 128, 3]
            assert list((root / 'videos' / f'observation.images.{cam}').rglob('*.mp4'))
        assert [k for k in feats if k.startswith('observation.images.')] == ['observation.images.front',
                                                                            'observation.images.wrist']
        rows = pq.read_table(root / 'data' / 'chunk-000' / 'file-000.parquet').to_pylist()
        assert rows and all(row['complementary_info.is_intervention'] == 1.0 for row in rows)


def test_real_train_learns_from_the_demos_with_the_operator_in_the_loop(franky_sim, collected, tmp_path):
    """`run real_train` against franky-sim from real_collect's camera demos, the scripted SpaceMouse
    operator in the loop and the camera stand-ins: the shipped config's pixels observation (robot
    states + both cameras, the keypoint encoder). The policy answers once the learner announced
    itself; the learner pretrains the encoder on the demos' frames, trains RLPD on demos + online
    rows and sends versions back; every stored row carries its frames, the version that produced
    it and the intervention flags; the run stops by itself after its steps. Its reward is the
    success classifier that `run train_reward` learned from real_collect's labeled datasets
    (reward_source classifier): every stored step's reward is the classifier's."""
    port = free_udp_port()
    demos = collected[0] / 'demos'
    trained = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'train_reward', '--demos',   # the docs' command
                              str(collected[0] / 'logs'), '--output-dir', str(tmp_path / 'reward'),
                              '--config', str(ROOT / 'config' / 'train_reward.yaml')],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0 and 'of 2 episodes (2 successful)' in trained.stdout, \
        trained.stdout[-2000:] + trained.stderr[-2000:]
    out = tmp_path / 'logs'
    # bounded staleness (step s waits for version s - 2): new versions act in this short run however loaded
    # the machine; the shipped config never waits after the learner's first weights
    import yaml
    from rl_traj_ros.pipelines.real_train import DEFAULT_CONFIG
    config = tmp_path / 'real_train.yaml'
    shipped = yaml.safe_load(DEFAULT_CONFIG.read_text())
    assert shipped['observation'] == 'pixels' and shipped['image_encoder'] == 'keypoints' and shipped['cameras']
    # a few pretraining passes: the encoder's learning is the unit tests'; here the frames' way through
    config.write_text(yaml.safe_dump({**shipped, 'max_version_lag': 2, 'camera_sync_tolerance_s': 0.3,
                                      'learner': {**shipped['learner'], 'encoder_pretrain_epochs': 2},
                                      'reward_source': 'classifier',
                                      'reward_classifier': str(tmp_path / 'reward' / 'success_classifier.pt')}))
    cmd = [sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'real_train', '--config', str(config), '--robot-ip',
           franky_sim, '--demos-dir', str(demos), '--log-dir', str(out), '--hid-udp-port', str(port), '--steps', '6',
           '--camera', 'front=/rt_cam/front/image_raw', '--camera', 'wrist=/rt_cam/wrist/image_raw/compressed',
           '--quiet']
    with scripted_cell(port, (0.5, 0.0, 0.3), [('/rt_cam/front/image_raw', []),
                                               ('/rt_cam/wrist/image_raw/compressed', ['--rate', '15'])]):
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=270)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = (out / 'latest').resolve()
    metrics = [json.loads(x) for x in (run / 'metrics.jsonl').read_text().splitlines()]
    assert metrics and metrics[-1]['version'] >= 1 and metrics[-1]['demo_rows'] > 0, metrics[-1:]
    # the learner pretrained the keypoint encoder on the cameras' frames before its first step
    assert metrics[0]['encoder_pretrain_frames'] > 0, metrics[0]
    from rl_traj_ros.storage.files import load_trajectory
    ids = json.loads((run / 'replay_buffer' / 'trajectory_index.json').read_text())['trajectory_ids']
    rows = [load_trajectory(run / 'replay_buffer' / f'trajectory_{i:08d}.pt', 'pt') for i in ids]
    versions = torch.cat([d['versions'].reshape(-1) for d in rows])
    flags = torch.cat([d['intervene_flags'].reshape(-1) for d in rows])
    assert len(versions) == 6 * 10  # 6 steps of 10 control steps, every one stored once
    assert int(versions.max()) >= 1  # the learner's new weights acted on the robot during the run
    assert bool(flags.any())  # the operator's interventions are in the online data, flagged
    assert all(d['curr_obs/main_images'].shape[-3:] == (128, 128, 3) and d['curr_obs/extra_view_images'].shape[-4] == 1
               for d in rows)   # both cameras' frames with every stored row
    assert (run / 'learner' / 'learner_checkpoint.pt').exists() and (run / 'learning_curve.png').exists()
    done = [x for x in (run / 'node_logs' / 'env_0.log').read_text().splitlines() if 'done: ' in x][-1]
    assert 'reward_classifier=60' in done and 'reward_env=0' in done, done   # every stored step's reward
    actor = torch.load(run / 'learner' / 'learner_checkpoint.pt', weights_only=True)['rlpd']['actor']
    assert bool(actor['encoder.frozen']) and len([k for k in actor if k.startswith('encoder.stacks.')]) > 0


def test_real_collect_config_maps_spec_keys(tmp_path):
    from rl_traj_ros.pipelines.real_collect import DEFAULT_CONFIG, load_config, node_params
    cfg = load_config(DEFAULT_CONFIG)
    params, teleop = node_params(cfg, tmp_path / 'run')
    env = params['franka_env_node']
    assert env['env_type'] == 'franky' and env['teleop_only'] and env['target_successes'] == cfg['num_data_episodes']
    assert env['target_ee_pose'] == cfg['target_ee_pose'] and env['success_hold_steps'] == cfg['success_hold_steps']
    assert params['replay_buffer_writer_node']['output_dir'] == str(tmp_path / 'run' / 'demos')
    assert env['collect_dir'] == str(tmp_path / 'run' / 'collected_data')
    assert list(teleop) == ['spacemouse']
    assert env['image_storage'] == 'video' and env['dataset_naming'] == 'lerobot'
    cfg.update(use_spacemouse=False, use_gello=True)
    assert list(node_params(cfg, tmp_path)[1]) == ['gello']
    from rl_traj_ros.pipelines.real_collect import apply_overrides
    cfg = apply_overrides(cfg, robot_ip='10.0.0.2', episodes=3, hid_udp_port=27001, teleop='spacemouse',
                          image_storage='png')
    env = node_params(cfg, tmp_path)[0]['franka_env_node']
    assert (env['robot_ip'], env['target_successes'], env['image_storage']) == ('10.0.0.2', 3, 'png')
    assert cfg['use_spacemouse'] and not cfg['use_gello'] and cfg['spacemouse']['hid_udp_port'] == 27001
    bad = tmp_path / 'bad.yaml'
    bad.write_text(DEFAULT_CONFIG.read_text().replace('use_gello: false', 'use_gello: true'))
    with pytest.raises(ValueError, match='mutually exclusive'):
        load_config(bad)


@pytest.mark.skipif(__import__('importlib').util.find_spec('launch_ros') is None,
                    reason='launch/launch_ros are not installed here (they are on a ROS 2 workstation)')
def test_real_collect_launch_file_loads():
    import importlib.util
    spec = importlib.util.spec_from_file_location('rc_launch', ROOT / 'launch' / 'real_collect.launch.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.generate_launch_description().entities


@needs_lerobot
def test_real_eval_runs_a_lerobot_checkpoint_with_the_operator_able_to_take_over(franky_sim, collected, tmp_path):
    """The README's robot line: ACT trained by stock lerobot-train on real_collect's dataset (two
    cameras), run by `run real_eval` against franky-sim with the camera stand-ins and the scripted
    SpaceMouse: the checkpoint acts where the operator is idle, the operator's active device
    replaces its actions, and both are recorded (replay buffer flags, LeRobot is_intervention)."""
    ds = collected[0] / 'logs' / 'latest' / 'collected_data' / 'env_0'
    checkpoint = train_tiny_act(ds, tmp_path / 'act')
    port = free_udp_port()
    import yaml
    from rl_traj_ros.pipelines.real_eval import DEFAULT_CONFIG
    config = tmp_path / 'real_eval.yaml'  # the stand-ins' tolerance as in `collected`; short episodes
    config.write_text(yaml.safe_dump({**yaml.safe_load(DEFAULT_CONFIG.read_text()), 'camera_sync_tolerance_s': 0.3,
                                      'max_episode_steps': 40}))
    out = tmp_path / 'logs'
    cmd = [sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'real_eval', '--config', str(config), '--robot-ip',
           franky_sim, '--checkpoint', str(checkpoint), '--eval-episodes', '2', '--log-dir', str(out),
           '--hid-udp-port', str(port), '--camera', 'front=/re_cam/front/image_raw',
           '--camera', 'wrist=/re_cam/wrist/image_raw/compressed', '--quiet']
    # the operator holds the TCP at home (0.554, 0, 0.521): idle while the checkpoint keeps it there, it takes over
    # as soon as the checkpoint's actions move it more than 6 mm away
    with scripted_cell(port, (0.554, 0.0, 0.521), [('/re_cam/front/image_raw', []),
                                                   ('/re_cam/wrist/image_raw/compressed', [])]):
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert '[real_eval] 2 episodes, 0 successful' in r.stdout, r.stdout[-2000:]  # the target is never reached
    run = (out / 'latest').resolve()
    from rl_traj_ros.storage.files import load_trajectory
    ids = json.loads((run / 'replay_buffer' / 'trajectory_index.json').read_text())['trajectory_ids']
    rows = [load_trajectory(run / 'replay_buffer' / f'trajectory_{i:08d}.pt', 'pt') for i in ids]
    flags = torch.cat([d['intervene_flags'].reshape(-1) for d in rows])
    assert bool(flags.any()) and not bool(flags.all()), flags  # the operator took over, the checkpoint acted too
    import pyarrow.parquet as pq
    frames = pq.read_table(run / 'collected_data' / 'env_0' / 'data' / 'chunk-000' / 'file-000.parquet').to_pylist()
    marks = {row['complementary_info.is_intervention'][0] if isinstance(row['complementary_info.is_intervention'], list)
             else row['complementary_info.is_intervention'] for row in frames}
    assert marks == {0.0, 1.0}, marks


def test_real_collect_ends_whole_on_a_launch_ctrl_c(franky_sim, tmp_path):
    """real_collect against franky-sim with the scripted SpaceMouse operator and a camera stand-in,
    stopped as `ros2 launch` does it (test/launch_signals.py: SIGINT to the group, again to each node
    0.3 s later) mid-episode: every node, the teleop node too, exits 0 before launch's SIGTERM, the
    demos load, and every chunk the robot executed is stored once or listed as its open episode."""
    from rl_traj_ros.pipelines import real_collect as rc
    from rl_traj_ros.pipelines.sim_collect import params_yaml
    from launch_signals import LaunchLikeRun
    from test_launch_signals import _check
    port = free_udp_port()
    cfg = rc.check_config(rc.apply_overrides(rc.load_config(rc.DEFAULT_CONFIG), franky_sim, str(tmp_path / 'demos'),
                                             str(tmp_path / 'logs'), episodes=100, hid_udp_port=port,
                                             cameras=['front=/lsig_cam/front/image_raw']))
    params, extra = rc.node_params(cfg, tmp_path)
    run = LaunchLikeRun(params_yaml(params), tmp_path / 'run')
    with scripted_cell(port, (0.5, 0.0, 0.3), [('/lsig_cam/front/image_raw', [])]):
        try:
            run.start_pipeline(1, extra)
            run.wait_for('env_0', 'chunks', 6)
            run.wait_connected()
            ended = run.ctrl_c(0.3)
        finally:
            run.stop()
    _check(run, ended, Path(params['replay_buffer_writer_node']['output_dir']))


def test_real_collect_takes_no_command_of_another_run_in_its_domain(franky_sim, tmp_path):
    """A colleague's `run sim_collect` and a SpaceMouse node of that other run share the ROS domain
    (same topics, same node names) with real_collect on franky-sim; the other run's operator pushes
    towards another pose. The robot takes neither their chunks nor their interventions (each dropped
    as foreign, on both topics), the episode ends at this run's target by this run's operator, and
    the neighbour's own run ends normally."""
    from rl_traj_ros.delivery.run_guard import new_secret_file
    port, theirs_port = free_udp_port(), free_udp_port()
    key = new_secret_file('our-cell', str(tmp_path / 'keys'))
    neighbour = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--no-images',
                                  '--steps', '100000', '--output-dir', str(tmp_path / 'theirs'), '--run-id',
                                  'their-sim', '--quiet'], cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)
    their_mouse = ['-m', 'rl_traj_ros.nodes.spacemouse_teleop_node', '--ros-args', '-p', 'run_id:=their-sim', '-p',
                   f'hid_udp_port:={theirs_port}']
    try:
        with ros_process(their_mouse), ros_process(['test/spacemouse_operator.py', str(theirs_port), '0.65', '0.2',
                                                    '0.5', 'their-sim']), \
                scripted_cell(port, (0.5, 0.0, 0.3), [('/rf_cam/front/image_raw', [])], run_id='our-cell'):
            out = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'real_collect', '--robot-ip',
                                  franky_sim, '--episodes', '1', '--log-dir', str(tmp_path / 'logs'), '--demos-dir',
                                  str(tmp_path / 'demos'), '--hid-udp-port', str(port), '--camera',
                                  'front=/rf_cam/front/image_raw', '--run-id', 'our-cell', '--secret-file', key,
                                  '--quiet'], cwd=ROOT, capture_output=True, text=True, timeout=240)
    finally:
        stop_process(neighbour, grace=60)  # a runner's Ctrl-C drains up to 10 s, then each node stops (docs/launch.md)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    theirs = neighbour.stdout.read()
    assert neighbour.returncode == 0 and 'interrupted (SIGINT)' in theirs, theirs[-3000:]
    run = next(p for p in (tmp_path / 'logs').iterdir() if not p.is_symlink())
    env_log = (run / 'node_logs' / 'env_0.log').read_text()
    for topic in ('/rl_traj/action_chunk', '/rl_traj/intervention'):
        assert f"{topic}: dropping messages of another run 'their-sim'" in env_log, topic
    done = next(x for x in env_log.splitlines() if ': done: ' in x)
    assert ' foreign=' in done and ' foreign=0 ' not in done, done
    from rl_traj_ros.storage.files import load_trajectory
    demos = tmp_path / 'demos'
    (tid,) = _demo_ids(demos)
    d = load_trajectory(demos / f'trajectory_{tid:08d}.pt', 'pt')
    assert bool(d['intervene_flags'].all()) and float(d['rewards'].max()) >= 0.5   # our operator, our target
