"""A real cell's task without a pose target against franky-sim: the operator's success label from
the SpaceMouse (a button chord) and from GELLO's foot switch ends the episode and is in the demos
and the dataset, a success classifier scores the steps before it; a cell reward that cannot work
is refused before anything starts. In a file of its own (the franky-sim fixture is shared) so that
the test workers share real_collect's minutes."""
import os
import re
import subprocess
import sys
import time

import pytest
import torch

pytest.importorskip('franky')
pytest.importorskip('franky_sim')

from rosutil import ROOT, free_udp_port, scripted_cell, stop_process  # noqa: E402
from test_real_collect import _demo_ids, franky_sim  # noqa: E402,F401 - the fixture


@pytest.mark.parametrize('source', ['operator', 'classifier'])
def test_a_spacemouse_chord_ends_the_episode_of_a_task_without_a_pose_target(franky_sim, tmp_path, source):
    """A real cell whose success no robot state gives (no target_ee_pose): `run real_collect`
    against franky-sim with a camera stand-in; the scripted operator drives to a place and, once
    there, presses both SpaceMouse buttons (raw HID reports, pyspacemouse's decoder): the label
    takes the next step with reward 1, the episode goes on for the shipped config's
    steps_after_success steps (each a success, the result held in view) and the last terminates; the
    demos keep it, the LeRobot dataset records the label (next.reward, next.success, reward_source).
    reward_source operator: every step is the operator's; classifier: a success classifier that
    never fires scores every step before the label, and the operator's label overrides it."""
    import yaml
    import pyarrow.parquet as pq
    from rl_traj_ros.pipelines.real_collect import DEFAULT_CONFIG
    from rl_traj_ros.rewards import classifier as rc
    from rl_traj_ros.rewards.detector import Source
    port = free_udp_port()
    reward = {'reward_source': source}
    if source == 'classifier':
        never = rc.SuccessClassifier(['front'], 128)
        with torch.no_grad():
            never.heads[0][-1].bias.fill_(-50.0)
        reward['reward_classifier'] = str(rc.save(never, tmp_path / 'never.pt', 0.5, {}))
    shipped = yaml.safe_load(DEFAULT_CONFIG.read_text())
    tail = int(shipped['steps_after_success'])
    assert tail > 0, 'the shipped real_collect config records frames after a success'
    config = tmp_path / 'real_collect.yaml'
    config.write_text(yaml.safe_dump({**shipped, 'camera_sync_tolerance_s': 0.3, 'target_ee_pose': [], **reward}))
    cmd = [sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'real_collect', '--config', str(config), '--robot-ip',
           franky_sim, '--episodes', '1', '--log-dir', str(tmp_path / 'logs'), '--demos-dir', str(tmp_path / 'demos'),
           '--hid-udp-port', str(port), '--camera', 'front=/lab_cam/front/image_raw']
    with scripted_cell(port, (0.5, 0.0, 0.3), [('/lab_cam/front/image_raw', [])], label_at_target=True):
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-3000:]
    # the recorded episode took one label (its rewards below); on a loaded machine the operator may
    # label the next episode too, begun while the run stops after its one
    taken = re.search(r'labels_taken=(\d+)', said)
    assert 'episode label success (button chord)' in said and taken and int(taken[1]) >= 1, said[-3000:]
    from rl_traj_ros.storage.files import load_trajectory
    (tid,) = _demo_ids(tmp_path / 'demos')
    d = load_trajectory(tmp_path / 'demos' / f'trajectory_{tid:08d}.pt', 'pt')
    rewards = d['rewards'].flatten().tolist()
    assert len(rewards) > tail + 1 and rewards == [0.0] * (len(rewards) - tail - 1) + [1.0] * (tail + 1), rewards
    assert bool(d['terminations'][-1].all()) and not bool(d['terminations'][:-1].any())
    root = (tmp_path / 'logs' / 'latest').resolve() / 'collected_data' / 'env_0'
    rows = pq.read_table(root / 'data' / 'chunk-000' / 'file-000.parquet').to_pylist()
    before = len(rows) - tail - 1
    assert [r['next.reward'] for r in rows] == [0.0] * before + [1.0] * (tail + 1)
    assert [bool(r['next.success']) for r in rows] == [False] * before + [True] * (tail + 1)
    scored = Source.OPERATOR if source == 'operator' else Source.CLASSIFIER
    assert [r['complementary_info.reward_source'] for r in rows] == [float(scored)] * before + \
        [float(Source.OPERATOR)] * (tail + 1)


def test_a_gello_foot_switch_ends_the_episode_of_a_task_without_a_pose_target(franky_sim, tmp_path):
    """GELLO leaves no hand free: `run real_collect` with the GELLO node on the Dynamixel emulator
    (a pty) against franky-sim, no pose target, reward_source operator, and a foot switch stand-in
    (a FIFO receiving the kernel's input_event records) pressed until the env takes its label: the
    episode ends with reward 1 on the label's step, the demos and the dataset hold it, every step
    scored by the operator."""
    pytest.importorskip('dynamixel_sdk')
    pytest.importorskip('pinocchio')
    import yaml
    import pyarrow.parquet as pq
    from dxl_emulator import DynamixelEmulator
    from rl_traj_ros.pipelines.real_collect import DEFAULT_CONFIG
    from rl_traj_ros.rewards.detector import Source
    from rl_traj_ros.params.defaults import GELLO
    from rl_traj_ros.teleop.gello import HOME
    from rl_traj_ros.teleop.pedal import EV_KEY, EVENT
    emu = DynamixelEmulator(range(1, 9))
    shipped = yaml.safe_load(DEFAULT_CONFIG.read_text())
    gello = shipped['gello']
    emu.set_positions_rad({i + 1: HOME[i] * gello['joint_signs'][i] + gello['joint_offsets'][i] for i in range(7)})
    emu.set_positions_rad({8: GELLO.gripper_open_rad})
    fifo = tmp_path / 'foot_switch'
    os.mkfifo(fifo)
    config = tmp_path / 'real_collect.yaml'
    config.write_text(yaml.safe_dump({**shipped, 'target_ee_pose': [], 'reward_source': 'operator',
                                      'steps_after_success': 0, 'use_spacemouse': False, 'use_gello': True,
                                      'gello_port': emu.port, 'gello': {**gello, 'label_device': str(fifo)}}))
    log = tmp_path / 'run.log'
    with open(log, 'w') as out:
        run = subprocess.Popen([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'real_collect', '--config', str(config),
                                '--robot-ip', franky_sim, '--episodes', '1', '--log-dir', str(tmp_path / 'logs'),
                                '--demos-dir', str(tmp_path / 'demos')], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    fd, deadline = None, time.monotonic() + 200
    try:
        while run.poll() is None and time.monotonic() < deadline:
            time.sleep(1.0)   # the operator presses the success pedal until the env takes a label
            if fd is None:
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)   # once the GELLO node reads it
                except OSError:
                    continue
            if 'episode label 1 for env -1 from gello' not in log.read_text():   # the env node took it
                t = time.time()
                os.write(fd, EVENT.pack(int(t), 0, EV_KEY, 31, 1) + EVENT.pack(int(t), 0, EV_KEY, 31, 0))
        assert run.wait(60) == 0, log.read_text()[-3000:]
    finally:
        stop_process(run)
        if fd is not None:
            os.close(fd)
        emu.close()
    said = log.read_text()
    assert 'episode label success (key 31)' in said, said[-3000:]
    from rl_traj_ros.storage.files import load_trajectory
    (tid,) = _demo_ids(tmp_path / 'demos')
    d = load_trajectory(tmp_path / 'demos' / f'trajectory_{tid:08d}.pt', 'pt')
    rewards = d['rewards'].flatten().tolist()
    assert rewards == [0.0] * (len(rewards) - 1) + [1.0] and bool(d['terminations'][-1].all())
    root = (tmp_path / 'logs' / 'latest').resolve() / 'collected_data' / 'env_0'
    rows = pq.read_table(root / 'data' / 'chunk-000' / 'file-000.parquet').to_pylist()
    assert rows[-1]['next.reward'] == 1.0 and rows[-1]['next.success'] and not any(r['next.success'] for r in rows[:-1])
    assert {r['complementary_info.reward_source'] for r in rows} == {float(Source.OPERATOR)}


def test_a_cell_reward_that_cannot_work_is_refused_before_anything_starts(tmp_path):
    """No pose target and the env's reward: nothing would ever succeed; a success classifier of
    other cameras: its scores would be nonsense. Both refused by name, exit 2, nothing started."""
    import yaml
    from rl_traj_ros.pipelines.real_collect import DEFAULT_CONFIG
    from rl_traj_ros.rewards import classifier as rc
    shipped = yaml.safe_load(DEFAULT_CONFIG.read_text())
    ck = rc.save(rc.SuccessClassifier(['front'], 128), tmp_path / 'front_only.pt', 0.5, {})

    def run(**cfg):
        path = tmp_path / 'cfg.yaml'
        path.write_text(yaml.safe_dump({**shipped, **cfg}))
        return subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'real_collect', '--config', str(path),
                               '--robot-ip', '127.0.0.1', '--log-dir', str(tmp_path / 'logs')],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    r = run(target_ee_pose=[])
    assert r.returncode == 2 and 'the task has no target_ee_pose' in r.stderr, r.stderr[-2000:]
    r = run(reward_source='classifier')
    assert r.returncode == 2 and 'needs reward_classifier' in r.stderr, r.stderr[-2000:]
    r = run(reward_source='classifier', reward_classifier=str(ck))
    assert r.returncode == 2 and 'needs the cameras it was trained on' in r.stderr, r.stderr[-2000:]
    r = run(reward_source='classifier', reward_classifier=str(ck), cameras={'front': '/f', 'wrist': '/w'})
    assert r.returncode == 2 and "trained on cameras ['front'] at 128x128; this run has cameras ['front', 'wrist']" \
        in r.stderr, r.stderr[-2000:]
    (tmp_path / 'code.pt').write_bytes(b'\x80\x04not a checkpoint')
    r = run(reward_source='classifier', reward_classifier=str(tmp_path / 'code.pt'), cameras={'front': '/f'})
    assert r.returncode == 2 and 'code.pt: not a success classifier checkpoint' in r.stderr, r.stderr[-2000:]
    r = run(reward_source='judge')
    assert r.returncode == 2 and 'reward_source must be one of env, classifier, operator' in r.stderr
    assert not (tmp_path / 'logs').exists()
