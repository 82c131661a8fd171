"""Policy ``lerobot``: a ``lerobot-train`` checkpoint (ACT, diffusion, ...) answering the policy
node's requests.

The checkpoint runs in its own process under the LeRobot interpreter (``lerobot_server.py``;
LeRobot needs Python >= 3.12, rclpy here is 3.11), started once and fed one frame per request.
This object maps the env's observation onto the feature names the dataset used: ``states`` ->
``observation.state``, ``main_images`` -> ``observation.images.<camera_names[0]>`` and
``extra_view_images[:, j]`` -> ``observation.images.<camera_names[j + 1]>``, checking each
shape against the checkpoint's ``config.json`` before the first request, so a wrong camera
name, image size or state layout fails at start-up, named.

It offers what ``PolicyWorker`` calls on a model (``act``, ``values``, ``chunk``,
``action_dim``): the actions of the chunk, zero log-probabilities and values (no learner trains
it). Rows that start a new episode are told to the server (``new_episodes``), which clears
their ensembling state and observation history.

Trust: the checkpoint's ``model.safetensors`` and processor files are loaded by LeRobot
(safetensors and JSON, no pickle); its ``config.json`` picks the LeRobot policy class. Nothing
is downloaded (``HF_HUB_OFFLINE=1``): a checkpoint that names a pretrained backbone to fetch
fails to load, named.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from ..params.defaults import POLICY
from .lerobot_wire import WireError, read_frame, write_frame

SERVER = Path(__file__).with_name('lerobot_server.py')
VENV_SCRIPT = 'tools/lerobot_venv.sh'
STATE_KEY = 'observation.state'
IMAGE_PREFIX = 'observation.images.'


def default_python() -> Path:
    """Where ``tools/lerobot_venv.sh`` puts the LeRobot venv ($RL_TRAJ_ROS_LEROBOT_VENV or its default)."""
    cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    venv = os.environ.get('RL_TRAJ_ROS_LEROBOT_VENV') or os.path.join(cache, 'rl_traj_ros', 'venv-lerobot-0.6.1')
    return Path(venv) / 'bin' / 'python'


def find_python(given: str = '') -> Path:
    """The LeRobot interpreter: ``given`` (the ``lerobot_python`` parameter), else
    ``$RL_TRAJ_ROS_LEROBOT_PYTHON``, else the venv of ``tools/lerobot_venv.sh``."""
    path = Path(given or os.environ.get('RL_TRAJ_ROS_LEROBOT_PYTHON') or default_python())
    if not os.access(path, os.X_OK):
        raise ValueError(f"policy 'lerobot' needs LeRobot 0.6.1 (Python >= 3.12); no interpreter at {path}: "
                         f'install it with `bash {VENV_SCRIPT}` or set lerobot_python')
    return path


def pretrained_dir(checkpoint: str | Path) -> Path:
    """``.../pretrained_model`` (what lerobot-train writes), also given as its checkpoint
    directory (``checkpoints/N``, ``checkpoints/last``) or a training output directory."""
    p = Path(checkpoint).expanduser()
    for cand in (p, p / 'pretrained_model', p / 'checkpoints' / 'last' / 'pretrained_model'):
        if (cand / 'config.json').is_file() and (cand / 'model.safetensors').is_file():
            return cand.resolve()
    raise ValueError(f'checkpoint {str(checkpoint)!r}: no LeRobot pretrained_model (config.json + '
                     'model.safetensors) there; give lerobot-train\'s .../checkpoints/<N>/pretrained_model')


def server_env() -> dict:
    """The server's environment: no ROS or venv paths of this interpreter, nothing downloaded, and
    this node's torch threads (``torch_threads``, already set here): the inference runs there, and
    torch's every-core default would spin against the env node on the same cores."""
    import torch
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'PYTHONHOME', '_ROS_WHEELS_BOOTSTRAP_COMPLETE', 'VIRTUAL_ENV')}
    return {**env, 'HF_HUB_OFFLINE': '1', 'WANDB_MODE': 'disabled', 'PYTHONUNBUFFERED': '1',
            'OMP_NUM_THREADS': str(torch.get_num_threads())}


class LeRobotServer:
    """The LeRobot process and its pipe: ``call`` sends one frame and waits for the answer."""

    def __init__(self, checkpoint: str | Path, steps: int, python: str = '', device: str = POLICY.device,
                 temporal_ensemble_coeff: float = POLICY.temporal_ensemble_coeff, seed: int = POLICY.seed):
        self.checkpoint = pretrained_dir(checkpoint)
        cmd = [str(find_python(python)), str(SERVER), '--checkpoint', str(self.checkpoint), '--steps', str(steps),
               '--device', device, '--temporal-ensemble-coeff', str(temporal_ensemble_coeff), '--seed', str(seed)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=server_env())
        header, _ = self._read()
        if not header.get('ok'):
            self.close()
            raise ValueError(f"checkpoint {self.checkpoint}: LeRobot could not load it: {header.get('error')}")
        self.info = header

    def _read(self) -> tuple[dict, dict]:
        try:
            return read_frame(self.proc.stdout)
        except WireError:
            code = self.proc.wait(timeout=10)
            raise ValueError(f'the LeRobot inference process exited (code {code}); its output is above') from None

    def call(self, op: str, arrays: dict, **header) -> dict:
        try:
            write_frame(self.proc.stdin, {'op': op, **header}, arrays)
        except (BrokenPipeError, OSError):
            raise ValueError(f'the LeRobot inference process is gone (code {self.proc.poll()})') from None
        reply, out = self._read()
        if not reply.get('ok'):
            raise ValueError(f"LeRobot {op}: {reply.get('error')}")
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # the server ends at the end of its input
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class FeatureMap:
    """The checkpoint's input features from the env's observation dict."""

    def __init__(self, features: dict, camera_names: Sequence[str]):
        self.state: Optional[int] = None
        self.images: list[tuple[str, int, tuple]] = []  # (feature, stream index: 0 main, j extra j-1, (H, W))
        for name, shape in features.items():
            if name == STATE_KEY:
                self.state = int(shape[0])
            elif name.startswith(IMAGE_PREFIX):
                cam = name[len(IMAGE_PREFIX):]
                if cam not in camera_names:
                    raise ValueError(f'the checkpoint reads camera {cam!r} ({name}) but camera_names is '
                                     f'{list(camera_names)}: name the env\'s cameras as the dataset did')
                self.images.append((name, list(camera_names).index(cam), (int(shape[1]), int(shape[2]))))
            else:
                raise ValueError(f'the checkpoint reads {name!r}, which the env does not provide '
                                 f'(it provides {STATE_KEY} and {IMAGE_PREFIX}<camera>)')

    def __call__(self, obs: dict) -> dict[str, np.ndarray]:
        out = {}
        if self.state is not None:
            s = np.asarray(obs['states'], np.float32)
            if s.shape[-1] != self.state:
                raise ValueError(f'{STATE_KEY}: the checkpoint expects {self.state} values, the env sends '
                                 f"{s.shape[-1]} (observation 'pixels' leaves out the cube's xyz; 'state' has it)")
            out[STATE_KEY] = s
        for name, idx, hw in self.images:
            if idx == 0 and 'main_images' in obs:
                img = obs['main_images']
            elif idx > 0 and 'extra_view_images' in obs and obs['extra_view_images'].shape[1] >= idx:
                img = obs['extra_view_images'][:, idx - 1]
            else:
                raise ValueError(f'{name}: the env sends no image for camera stream {idx} (is image_obs on, '
                                 'with a camera per name?)')
            img = np.asarray(img)
            if tuple(img.shape[1:3]) != hw:
                raise ValueError(f'{name}: the checkpoint expects {hw[0]}x{hw[1]} images, the env sends '
                                 f'{img.shape[1]}x{img.shape[2]} (set image_size to {hw[0]})')
            out[name] = np.ascontiguousarray(img, dtype=np.uint8)
        return out


class LeRobotPolicy:
    """What ``PolicyWorker`` calls on a model, answered by a LeRobot checkpoint."""

    def __init__(self, checkpoint: str, chunk: int, action_dim: int, camera_names: Sequence[str],
                 python: str = '', device: str = POLICY.device,
                 temporal_ensemble_coeff: float = POLICY.temporal_ensemble_coeff, seed: int = POLICY.seed):
        self.chunk, self.action_dim = int(chunk), int(action_dim)
        self.server = LeRobotServer(checkpoint, self.chunk, python, device, temporal_ensemble_coeff, seed)
        info = self.server.info
        try:
            if int(info['action_dim']) != self.action_dim:
                raise ValueError(f"checkpoint {self.server.checkpoint}: its action has {info['action_dim']} values, "
                                 f'the env takes action_dim {self.action_dim}')
            self.features = FeatureMap(info['input_features'], camera_names)
        except ValueError:
            self.server.close()
            raise
        self._reset: set[int] = set()

    def describe(self) -> str:
        i = self.server.info
        ens = f", temporal ensembling {i['ensemble']}" if i['ensemble'] is not None else ''
        return (f"LeRobot {i['type']} from {self.server.checkpoint} (predicts {i['chunk_size']} actions, "
                f'executes {self.chunk} per request{ens})')

    def new_episodes(self, rows: Sequence[int]) -> None:
        self._reset.update(int(r) for r in rows)

    @torch.no_grad()
    def act(self, obs: dict, generator: Optional[torch.Generator] = None, actions: Optional[torch.Tensor] = None,
            deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        arrays = self.features(obs)
        b = next(iter(arrays.values())).shape[0]
        task = [str(t) for t in obs.get('task_descriptions', [])] or None
        out = self.server.call('chunk', arrays, steps=self.chunk, reset=sorted(self._reset), task=task)
        self._reset.clear()
        a = torch.from_numpy(out['actions'].astype(np.float32)).reshape(b, self.chunk * self.action_dim)
        if actions is not None:  # the operator's actions replace these (demonstrations)
            a = actions.float()
        return a, torch.zeros_like(a), torch.zeros(b, 1)

    def values(self, obs: dict) -> torch.Tensor:
        """Zeros: no value function comes with an imitation checkpoint."""
        return torch.zeros(len(obs['states']), 1)

    def select(self, obs: dict, reset: bool) -> np.ndarray:
        """LeRobot's own per-step call (one row): the reference the node is compared with."""
        task = [str(t) for t in obs.get('task_descriptions', [])] or None
        return self.server.call('select', self.features(obs), reset=bool(reset), task=task)['action']

    def to(self, device) -> 'LeRobotPolicy':
        return self  # the server holds the model on its own device

    def eval(self) -> 'LeRobotPolicy':
        return self

    def close(self) -> None:
        self.server.close()


__all__ = ['LeRobotPolicy', 'LeRobotServer', 'FeatureMap', 'find_python', 'pretrained_dir']
