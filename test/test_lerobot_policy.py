"""Policy 'lerobot': a lerobot-train checkpoint answering the policy node, and the pixels observation.

The ROS-free parts first (the pipe's frames, the feature mapping, the refusals, the sim's pixels
observation); then, with the LeRobot venv, the whole path: scripted demos with cameras and no
cube position -> stock lerobot-train (a tiny ACT) -> `run sim_collect --policy lerobot` over DDS
on held-out state ids -> every executed action equals LeRobot's own select_action on the same
observations.
"""
import io
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

from rl_traj_ros.policies.lerobot_policy import FeatureMap, find_python, pretrained_dir
from rl_traj_ros.policies.lerobot_wire import read_frame, write_frame
from lerobot_tools import needs_lerobot, reference_diff, train_tiny_act
from rosutil import ROOT


def test_frames_carry_named_arrays_and_never_objects():
    buf = io.BytesIO()
    arrays = {'observation.state': np.arange(6, dtype=np.float32).reshape(2, 3),
              'observation.images.front': np.zeros((2, 4, 4, 3), np.uint8)}
    write_frame(buf, {'op': 'chunk', 'reset': [1]}, arrays)
    buf.seek(0)
    header, got = read_frame(buf)
    assert header == {'op': 'chunk', 'reset': [1]}
    assert set(got) == set(arrays) and all(np.array_equal(got[k], arrays[k]) for k in arrays)
    with pytest.raises(ValueError):  # numpy refuses to pickle: a frame carries data, never code
        write_frame(io.BytesIO(), {}, {'x': np.array([object()])})


def test_missing_lerobot_and_checkpoint_are_named(tmp_path, monkeypatch):
    monkeypatch.delenv('RL_TRAJ_ROS_LEROBOT_PYTHON', raising=False)
    with pytest.raises(ValueError, match=r'needs LeRobot 0.6.1 .*bash tools/lerobot_venv.sh'):
        find_python(str(tmp_path / 'nope' / 'python'))
    with pytest.raises(ValueError, match='no LeRobot pretrained_model'):
        pretrained_dir(tmp_path)
    from rl_traj_ros.assembly import make_policy_worker
    with pytest.raises(ValueError, match="policy 'lerobot' needs checkpoint"):
        make_policy_worker({'policy': 'lerobot'})
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--policy', 'lerobot',
                        '--output-dir', str(tmp_path / 'out')], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and 'needs --checkpoint' in r.stderr and not (tmp_path / 'out' / 'replay_buffer').exists()


def test_feature_map_names_what_does_not_fit():
    feats = {'observation.state': [18], 'observation.images.front': [3, 64, 64], 'observation.images.wrist': [3, 64, 64]}
    fm = FeatureMap(feats, ['front', 'wrist'])
    obs = {'states': torch.zeros(2, 18), 'main_images': torch.zeros(2, 64, 64, 3, dtype=torch.uint8),
           'extra_view_images': torch.ones(2, 1, 64, 64, 3, dtype=torch.uint8)}
    out = fm(obs)
    assert out['observation.state'].shape == (2, 18) and out['observation.images.wrist'].max() == 1
    with pytest.raises(ValueError, match="camera 'wrist' .*camera_names is \\['front', 'left'\\]"):
        FeatureMap(feats, ['front', 'left'])
    with pytest.raises(ValueError, match="expects 18 values, the env sends 21 .*'pixels'"):
        fm({**obs, 'states': torch.zeros(2, 21)})
    with pytest.raises(ValueError, match='expects 64x64 images, the env sends 128x128 .*image_size to 64'):
        fm({**obs, 'main_images': torch.zeros(2, 128, 128, 3, dtype=torch.uint8)})
    with pytest.raises(ValueError, match='environment_state'):
        FeatureMap({'observation.environment_state': [3]}, ['front'])


def test_sim_pixels_observation_has_no_cube_for_the_policy():
    from rl_traj_ros.envs.sim_franka import PROPRIO_DIM, SimFrankaVecEnv
    with pytest.raises(ValueError, match="observation 'pixels' needs the cameras"):
        SimFrankaVecEnv(1, image_obs=False, observation='pixels')
    env = SimFrankaVecEnv(1, image_obs=True, image_size=32, observation='pixels')
    try:
        obs, _ = env.reset()
        assert obs['states'].shape == (1, PROPRIO_DIM) and obs['main_images'].shape == (1, 32, 32, 3)
        assert np.array_equal(obs['privileged_states'][:, :PROPRIO_DIM], obs['states'])  # the cube: expert only
        assert env.state_names[-1] == 'tcp.z' and len(env.state_names) == PROPRIO_DIM
    finally:
        env.close()


@pytest.fixture(scope='module')
def tiny_act(tmp_path_factory):
    """Scripted demos with 64x64 cameras and no cube position over DDS, then stock lerobot-train."""
    tmp = tmp_path_factory.mktemp('lerobot_policy')
    from rl_traj_ros.pipelines.sim_collect import DEFAULT_CONFIG
    cfg = yaml.safe_load(DEFAULT_CONFIG.read_text())
    # 40-step episodes (whole chunks of 4) and every episode recorded: a short run gives a dataset
    cfg['/**/franka_env_node']['ros__parameters'].update(image_size=64, max_episode_steps=40, only_success=False)
    config = tmp / 'sim.yaml'
    config.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--config', str(config),
                        '--observation', 'pixels', '--steps', '1', '--output-dir', str(tmp / 'demos'), '--quiet'],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return tmp, config, train_tiny_act(tmp / 'demos' / 'collected_data' / 'env_0', tmp / 'act')


@needs_lerobot
def test_sim_collect_runs_the_checkpoint_and_equals_lerobots_select_action(tiny_act):
    """What the README's evaluation line does, over DDS: the node loads the checkpoint with its
    processors, maps the pixels observation onto the dataset's feature names and answers chunks
    of 4; every action the env executed equals stock LeRobot's select_action (n_action_steps 4)
    on the recorded observations."""
    tmp, config, checkpoint = tiny_act
    r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--config', str(config),
                        '--policy', 'lerobot', '--checkpoint', str(checkpoint), '--eval-episodes', '2',
                        '--output-dir', str(tmp / 'eval')], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "policy 'lerobot' ready (C=4, A=7): LeRobot act from" in r.stdout
    assert '[sim_collect] held-out success: ' in r.stdout and 'on held-out state ids' in r.stdout
    frames, diff = reference_diff(tmp / 'eval' / 'collected_data' / 'env_0', checkpoint, 4, tmp)
    print(f'{frames} frames, largest difference to LeRobot select_action {diff:.3g}', file=sys.stderr)
    # the node batches the 2 envs, LeRobot's loop takes one: float32 rounding, nothing more
    assert frames == 80 and diff <= 1e-6


@needs_lerobot
def test_temporal_ensembling_and_refusals_in_process(tiny_act):
    """The node's core object without ROS: ensembling averages the overlapping predictions (its
    first chunk is the plain one), learner weights are refused, a wrong camera is named."""
    from rl_traj_ros.data.schema import EnvPart, EnvTransition, PolicyInput, TrajectoryKey, TrajectorySource
    from rl_traj_ros.assembly import make_policy_worker
    _, _, checkpoint = tiny_act
    rng = np.random.default_rng(0)
    obs = {'states': torch.from_numpy(rng.normal(size=(2, 18)).astype(np.float32)),
           'main_images': torch.from_numpy(rng.integers(0, 255, (2, 64, 64, 3), dtype=np.uint8)),
           'extra_view_images': torch.from_numpy(rng.integers(0, 255, (2, 1, 64, 64, 3), dtype=np.uint8))}

    def source(step):
        return [TrajectorySource(TrajectoryKey(step, 0, 0, 0, 0), 2, 0)]

    def request(step):  # from the second on with the previous chunk's EnvPart: no episode ended
        prev = EnvPart(source(step - 1), EnvTransition.zeros(2, 4, 7)) if step else None
        return PolicyInput(source(step), obs, prev)
    base = {'policy': 'lerobot', 'checkpoint': str(checkpoint), 'chunk': 4, 'state_dim': 18}
    plain, ens = make_policy_worker(base), make_policy_worker({**base, 'temporal_ensemble_coeff': 0.01,
                                                                'torch_threads': 1})
    try:
        assert ens.model.server.info['torch_threads'] == 1   # the node's torch_threads reach the LeRobot process
        p0, e0 = plain.infer(request(0))[0].actions, ens.infer(request(0))[0].actions
        assert torch.allclose(p0, e0, atol=1e-6)  # one prediction: nothing to average yet
        p1, e1 = plain.infer(request(1))[0].actions, ens.infer(request(1))[0].actions
        assert torch.allclose(p0, p1) and not torch.allclose(e1, p1, atol=1e-6)  # the second averages the first's tail
        with pytest.raises(ValueError, match='takes no learner weights'):
            plain.set_weights({}, 1)
    finally:
        plain.close()
        ens.close()
    with pytest.raises(ValueError, match="camera 'wrist'"):
        make_policy_worker({**base, 'camera_names': ['front', 'left']})
