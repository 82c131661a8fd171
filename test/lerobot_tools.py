"""The LeRobot venv from tests: its interpreter, a clean environment for it, a tiny ACT.

`tools/test.sh` makes the venv (`tools/lerobot_venv.sh`); a test that needs it skips, naming
that command, where it is missing.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rl_traj_ros.policies.lerobot_policy import default_python, server_env

PYTHON = Path(os.environ.get('RL_TRAJ_ROS_LEROBOT_PYTHON') or default_python())
BIN = PYTHON.parent
needs_lerobot = pytest.mark.skipif(not os.access(PYTHON, os.X_OK),
                                   reason=f'no LeRobot venv at {PYTHON}: bash tools/lerobot_venv.sh makes it')


def run_lerobot(cmd: list, tmp: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """A LeRobot command with nothing of this interpreter's paths, offline."""
    env = {**server_env(), 'HF_HOME': str(tmp / 'hf')}
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=timeout)
    print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
    return r


def train_tiny_act(dataset: Path, out: Path, steps: int = 10, chunk_size: int = 8) -> Path:
    """Stock lerobot-train: a small ACT from scratch on CPU (no pretrained backbone: no network);
    returns its last checkpoint's pretrained_model directory."""
    r = run_lerobot([BIN / 'lerobot-train', '--dataset.repo_id=local/tiny', f'--dataset.root={dataset}',
                     '--policy.type=act', '--policy.device=cpu', '--policy.pretrained_backbone_weights=null',
                     '--policy.push_to_hub=false', '--policy.dim_model=64', '--policy.dim_feedforward=128',
                     '--policy.n_encoder_layers=1', '--policy.use_vae=false', f'--policy.chunk_size={chunk_size}',
                     f'--policy.n_action_steps={chunk_size}', f'--steps={steps}', '--batch_size=4', '--num_workers=0',
                     '--wandb.enable=false', f'--save_freq={steps}', '--log_freq=1', f'--output_dir={out}'], out.parent)
    assert r.returncode == 0, r.stderr[-3000:]
    losses = [float(x) for x in re.findall(r'step:\d+ \S+ \S+ \S+ loss:([0-9.]+)', r.stdout + r.stderr)]
    assert len(losses) == steps and all(0 < x < 1e3 for x in losses), losses  # every step logged a finite loss
    return out / 'checkpoints' / 'last' / 'pretrained_model'


def reference_diff(dataset: Path, checkpoint: Path, steps: int, tmp: Path) -> tuple[int, float]:
    """Frames and the largest difference between the dataset's recorded actions and LeRobot's own
    select_action on the dataset's observations (test/lerobot_reference.py)."""
    r = run_lerobot([PYTHON, Path(__file__).with_name('lerobot_reference.py'), dataset, checkpoint, '--steps', steps],
                    tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r'frames=(\d+) max_abs_diff=(\S+)', r.stdout)
    assert m, r.stdout
    return int(m.group(1)), float(m.group(2))
