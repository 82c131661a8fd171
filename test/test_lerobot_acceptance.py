"""Opt-in (RL_TRAJ_ROS_LEROBOT=1): the real lerobot 0.6.1 loads, trains on and visualizes what we wrote.

Needs the lerobot venv (Python 3.12, ~2.2 GB; `bash tools/lerobot_venv.sh` makes it), so it
is not part of the default suite. README: `RL_TRAJ_ROS_LEROBOT=1 bash tools/test.sh -k acceptance`.

- synthetic env, every layout and storage: every frame against the writer's truth (PNG bit-exact,
  video within the stated tolerance);
- the sim pipeline's own datasets (the main job over ROS, PNG and video): loaded with
  delta_timestamps action chunks, the video run compared frame by frame with the PNG run of the
  same seeds, stock `lerobot-train` ACT on CPU with its loss falling, `lerobot-dataset-viz --save`
  logging the cameras, state, action and next.* plots;
- the real-robot path (real_collect against franky-sim, scripted SpaceMouse, two camera stand-ins):
  its dataset loads with action chunks, and the README's LeRobot block, run as written, trains ACT
  and diffusion on it (loss falling) and visualizes both cameras.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rl_traj_ros.episodes import CollectEpisode

from episode_envs import ScriptedEnv
from rosutil import ROOT, free_udp_port, scripted_cell
from test_real_collect import franky_sim  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(os.environ.get('RL_TRAJ_ROS_LEROBOT') != '1',
                                reason='opt-in: set RL_TRAJ_ROS_LEROBOT=1 (needs the lerobot 0.6.1 venv)')
# AV1 at CRF 30 (lerobot's default): mean absolute error per frame and camera, in [0, 1] pixel units
VIDEO_TOLERANCE = 0.03
SIM_ENTITIES = {'/action', '/state', '/next.done', '/next.reward', '/next.success',
                '/observation.images.front', '/observation.images.wrist'}


@pytest.fixture(scope='module')
def lerobot_bin() -> Path:
    out = subprocess.run(['bash', str(ROOT / 'tools' / 'lerobot_venv.sh')], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    return Path(out) / 'bin'


def _lerobot(cmd: list, tmp: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, 'HF_HUB_OFFLINE': '1', 'HF_HOME': str(tmp / 'hf'), 'WANDB_MODE': 'disabled',
           'PYTHONPATH': ''}
    env.pop('_ROS_WHEELS_BOOTSTRAP_COMPLETE', None)
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=timeout)
    print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
    return r


def accept(bin_dir: Path, dataset: Path, tmp: Path, *extra) -> str:
    r = _lerobot([bin_dir / 'python', ROOT / 'tools' / 'lerobot_accept.py', dataset,
                  '--video-tolerance', VIDEO_TOLERANCE, *extra], tmp)
    assert r.returncode == 0 and 'PASS' in r.stdout, r.stdout[-2000:]
    return r.stdout.strip().splitlines()[-1]


def train_act(bin_dir: Path, dataset: Path, tmp: Path, steps: int = 6) -> list[float]:
    """Stock lerobot-train, ACT from scratch on CPU (no pretrained backbone: no network)."""
    r = _lerobot([bin_dir / 'lerobot-train', '--dataset.repo_id=local/pipeline', f'--dataset.root={dataset}',
                  '--policy.type=act', '--policy.device=cpu', '--policy.pretrained_backbone_weights=null',
                  '--policy.push_to_hub=false', f'--steps={steps}', '--batch_size=4', '--num_workers=0',
                  '--wandb.enable=false', '--save_checkpoint=false', '--log_freq=1', f'--output_dir={tmp / "train"}'],
                 tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    losses = [float(x) for x in re.findall(r'step:\d+ \S+ \S+ \S+ loss:([0-9.]+)', r.stdout + r.stderr)]
    assert len(losses) == steps, (r.stdout + r.stderr)[-3000:]
    return losses


def viz_entities(bin_dir: Path, dataset: Path, tmp: Path) -> set[str]:
    """lerobot-dataset-viz --save writes a Rerun recording; the entities it logged."""
    out = tmp / 'viz'
    r = _lerobot([bin_dir / 'lerobot-dataset-viz', '--repo-id', 'local/pipeline', '--root', dataset,
                  '--episode-index', '0', '--save', '1', '--output-dir', out, '--num-workers', '0'], tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    rrd = next(out.glob('*.rrd'))
    printed = subprocess.run([str(bin_dir / 'rerun'), 'rrd', 'print', str(rrd)], capture_output=True, text=True,
                             check=True).stdout
    return set(re.findall(r'(/(?:action|state|next\.[a-z]+|observation\.images\.[a-z]+))\b', printed))


def write_dataset(root: Path, version: str, storage: str, naming: str = 'lerobot') -> int:
    fns = [lambda i=i: ScriptedEnv(i, (5, 3, 4), ('success', 'fail', 'trunc'), hw=32) for i in range(3)]
    venv = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    env = CollectEpisode(venv, str(root / 'ds'), num_envs=3, export_format='lerobot', lerobot_version=version,
                         finalize_interval=3, naming=naming, image_storage=storage,
                         camera_names=['front', 'left', 'right'])
    env.writer.truth_dir = root / 'truth'
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        env.step(rng.uniform(-1, 1, (3, 7)).astype(np.float32))
    env.close()
    return env.episodes_saved


@pytest.mark.parametrize('version,storage,naming', [('v3.0', 'png', 'lerobot'), ('v3.0', 'video', 'lerobot'),
                                                    ('v2.1', 'png', 'lerobot'), ('v3.0', 'png', 'rlinf')])
def test_real_lerobot_loads_every_frame(tmp_path, lerobot_bin, version, storage, naming):
    assert write_dataset(tmp_path, version, storage, naming) >= 6
    chunks = ['--chunk', '4'] if naming == 'lerobot' else []
    line = accept(lerobot_bin, tmp_path / 'ds', tmp_path, '--truth', tmp_path / 'truth', *chunks,
                  *(['--convert-v21'] if version == 'v2.1' else []))
    assert '0 mismatches' in line


@pytest.fixture(scope='module')
def sim_datasets(tmp_path_factory):
    """The main job over ROS, twice with the same seeds: PNG and video storage."""
    out = {}
    for storage in ('png', 'video'):
        d = tmp_path_factory.mktemp(f'sim_{storage}')
        r = subprocess.run([sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'sim_collect', '--episodes', '4',
                            '--image-storage', storage, '--output-dir', str(d)], cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        out[storage] = d / 'collected_data' / 'env_0'
    return out


@pytest.mark.parametrize('storage', ['png', 'video'])
def test_stock_lerobot_trains_on_the_sim_pipelines_dataset(sim_datasets, lerobot_bin, tmp_path, storage):
    ds = sim_datasets[storage]
    ref = ['--reference', sim_datasets['png']] if storage == 'video' else []
    line = accept(lerobot_bin, ds, tmp_path, '--chunk', '8', *ref)
    assert '0 mismatches' in line and 'action chunks of 8' in line
    losses = train_act(lerobot_bin, ds, tmp_path)
    print(f'[{storage}] {line}\n[{storage}] ACT loss per step: {losses}', file=sys.stderr)
    assert losses[-1] < losses[0]
    assert SIM_ENTITIES <= viz_entities(lerobot_bin, ds, tmp_path)


def readme_lerobot_block(marker: str = 'lerobot-commands') -> str:
    """A command block of the README or of docs/ (its marker comment names it), as written."""
    text = '\n'.join(p.read_text() for p in [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))])
    after = text.split(f'<!-- {marker}:', 1)[1]
    block = after.split('```bash\n', 1)[1].split('```', 1)[0]
    return '\n'.join(line[2:] if line.startswith('  ') else line for line in block.splitlines())


def test_real_collect_with_cameras_trains_act_and_diffusion_as_the_readme_says(franky_sim, lerobot_bin,  # noqa: F811
                                                                              tmp_path):
    """real_collect with two camera stand-ins (raw rgb8, JPEG): the dataset loads with action
    chunks; the README's LeRobot block, run as written, trains ACT (loss falling) and diffusion
    and lerobot-dataset-viz logs both cameras."""
    port = free_udp_port()
    cmd = [sys.executable, '-m', 'rl_traj_ros.cli', 'run', 'real_collect', '--robot-ip', franky_sim,
           '--episodes', '2', '--log-dir', str(tmp_path / 'logs'), '--hid-udp-port', str(port),
           '--camera', 'front=/acc_cam/front/image_raw', '--camera', 'wrist=/acc_cam/wrist/image_raw/compressed',
           '--quiet']
    with scripted_cell(port, (0.5, 0.0, 0.3), [('/acc_cam/front/image_raw', []),
                                               ('/acc_cam/wrist/image_raw/compressed', [])]):
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ds = tmp_path / 'logs' / 'latest' / 'collected_data' / 'env_0'
    line = accept(lerobot_bin, ds, tmp_path, '--chunk', '4')
    print(f'[real_collect] {line}', file=sys.stderr)
    env = {**os.environ, 'DATASET': str(ds), 'STEPS': '6', 'OUT': str(tmp_path / 'out'), 'HF_HOME': str(tmp_path / 'hf'),
           'WANDB_MODE': 'disabled', 'PYTHONPATH': ''}
    env.pop('_ROS_WHEELS_BOOTSTRAP_COMPLETE', None)
    block = readme_lerobot_block()
    r = subprocess.run(['bash', '-euo', 'pipefail', '-c', block], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    losses = [float(x) for x in re.findall(r'step:\d+ \S+ \S+ \S+ loss:([0-9.]+)', r.stdout + r.stderr)]
    print(f'[real_collect] README block: ACT then diffusion losses per step: {losses}', file=sys.stderr)
    # ACT's loss falls within 6 steps; diffusion's denoising loss is noise-dominated that early: it trains
    assert len(losses) == 12 and losses[5] < losses[0] and all(0 < x < 1e3 for x in losses[6:]), losses
    rrd = next((tmp_path / 'out' / 'viz').glob('*.rrd'))
    printed = subprocess.run([str(lerobot_bin / 'rerun'), 'rrd', 'print', str(rrd)], capture_output=True, text=True,
                             check=True).stdout
    assert {'/observation.images.front', '/observation.images.wrist', '/action', '/state'} <= set(
        re.findall(r'(/(?:action|state|observation\.images\.[a-z]+))\b', printed))


def test_readme_lerobot_policy_commands_run_as_written(lerobot_bin, tmp_path):
    """The README's three sim commands as written: pixels demos over DDS, stock lerobot-train ACT,
    the checkpoint through the policy node on held-out states (a few steps and episodes)."""
    env = {**os.environ, 'OUT': str(tmp_path / 'out'), 'EPISODES': '2', 'STEPS': '4', 'EVAL_EPISODES': '2',
           'HF_HOME': str(tmp_path / 'hf'), 'WANDB_MODE': 'disabled'}
    r = subprocess.run(['bash', '-euo', 'pipefail', '-c', readme_lerobot_block('lerobot-policy-commands')], cwd=ROOT,
                       capture_output=True, text=True, env=env, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert re.search(r'held-out success: \d+/[23] episodes', r.stdout), r.stdout[-3000:]
    assert "policy 'lerobot' ready (C=4, A=7): LeRobot act from" in r.stdout
