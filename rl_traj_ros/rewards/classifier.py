"""A binary success classifier over the run's cameras, and its checkpoint.

LeRobot's ``reward_classifier`` puts a head on a pretrained ResNet-10 from a hub; nothing is
downloaded here, so the model is the package's own small CNN (``policies.nets.conv_trunk``), one
trunk per camera (a front and a wrist view see different things), trained from scratch on the
operator's labeled frames (``rewards.train``). It outputs one logit per frame: the probability
that the task is done in it.

It may also see some of the robot's own states (``state_names``: e.g. the gripper's opening),
clipped to the range the training frames span and standardized by their mean and std: images
alone let RL find a pose whose view resembles a success (measured in the sim: the open gripper
held 10-19 cm from the cube until the wrist camera's view looked like a grasp), which the
gripper's state rules out. The clip because RL goes where the labels never were: with the TCP's
height as an input, a classifier trained on demos that lift the cube 10-20 cm scored a random
arm raised 40 cm with the gripper half closed at 0.54, and the run learned to raise the arm (every
episode a classifier success within 8 steps, none the sim's). Only the robot's proprioception
belongs here, never an object's state: a real cell has none.

The checkpoint names the cameras, in order, the image size and the states it was trained on: a
classifier fed another camera's view, or a resized image, gives confident nonsense, so a run whose
cameras or size differ, or that lacks one of its states, is refused (``check_matches``), naming both. It loads with ``weights_only=True``
(tensors and plain containers only: a checkpoint file cannot run code).
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import nn

from ..params.defaults import REWARD_TRAIN
from ..policies.nets import CONV_FEATURES, conv_trunk, seeded

FORMAT = 'rl_traj_ros.success_classifier/1'
HIDDEN = 64
STD_FLOOR = 1e-3   # a state that never moved in the training frames is centred, not blown up


class SuccessClassifier(nn.Module):
    """[N, V, H, W, 3] uint8 views (``policies.keypoints.camera_views`` order), and with
    ``state_names`` their [N, S] states in that order -> [N] logits."""

    def __init__(self, cameras: Sequence[str], image_size: int, seed: int = REWARD_TRAIN.seed,
                 state_names: Sequence[str] = ()):
        super().__init__()
        if not cameras:
            raise ValueError('a success classifier needs at least one camera')
        self.cameras, self.image_size, self.state_names = tuple(cameras), int(image_size), tuple(state_names)
        if self.state_names:   # set by fit_states from the training frames; saved with the weights
            for name, fill in (('state_mean', 0.0), ('state_std', 1.0), ('state_min', -math.inf),
                               ('state_max', math.inf)):
                self.register_buffer(name, torch.full((len(self.state_names),), fill))
        with seeded(seed):
            self.trunks = nn.ModuleList(nn.Sequential(*conv_trunk()) for _ in self.cameras)
            # the states get their own layer: a few inputs beside thousands of image features would
            # otherwise move the logit by one Adam step per weight, far slower than the images do
            self.state_layer = nn.Sequential(nn.Linear(len(self.state_names), HIDDEN), nn.ReLU()) \
                if self.state_names else None
            self.head = nn.Sequential(nn.Linear(len(self.cameras) * CONV_FEATURES + (HIDDEN if self.state_names else 0),
                                                HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))

    def fit_states(self, states: torch.Tensor) -> None:
        """Clip the states to these frames' range and standardize them by their mean and std
        (the training frames')."""
        states = torch.as_tensor(states, dtype=torch.float32)
        self.state_min.copy_(states.min(0).values)
        self.state_max.copy_(states.max(0).values)
        self.state_mean.copy_(states.mean(0))
        self.state_std.copy_(states.std(0, unbiased=False).clamp_min(STD_FLOOR))

    def forward(self, views: torch.Tensor, states: Optional[torch.Tensor] = None) -> torch.Tensor:
        if views.dim() != 5 or views.shape[1] != len(self.cameras):
            raise ValueError(f'the success classifier takes [N, {len(self.cameras)}, H, W, 3] views '
                             f'({", ".join(self.cameras)}), got {list(views.shape)}')
        x = views.to(torch.float32).div(255.0).permute(0, 1, 4, 2, 3)
        feats = [t(x[:, v]) for v, t in enumerate(self.trunks)]
        if self.state_names:
            if states is None or tuple(states.shape) != (views.shape[0], len(self.state_names)):
                raise ValueError(f'the success classifier also takes [N, {len(self.state_names)}] states '
                                 f'({", ".join(self.state_names)}), got '
                                 f'{None if states is None else list(states.shape)}')
            seen = torch.minimum(torch.maximum(states.to(torch.float32), self.state_min), self.state_max)
            feats.append(self.state_layer((seen - self.state_mean) / self.state_std))
        return self.head(torch.cat(feats, 1)).squeeze(1)

    @torch.no_grad()
    def probability(self, views: torch.Tensor, states: Optional[torch.Tensor] = None,
                    batch: int = 256) -> torch.Tensor:
        """Success probabilities of many frames, in slices that bound the memory."""
        was = self.training
        self.eval()
        try:
            return torch.cat([torch.sigmoid(self(views[i:i + batch], None if states is None else states[i:i + batch]))
                              for i in range(0, views.shape[0], batch)]) if views.shape[0] else torch.zeros(0)
        finally:
            self.train(was)

    def check_matches(self, cameras: Sequence[str], image_size: int,
                      state_names: Optional[Sequence[str]] = None) -> list[int]:
        """Refuse a run whose cameras (names, order) or image size differ from the training's, or
        whose states (the env's ``state_names``) lack one the classifier reads; return where its
        states are in the run's."""
        if tuple(cameras) != self.cameras or int(image_size) != self.image_size:
            raise ValueError(f'the success classifier was trained on cameras {list(self.cameras)} at '
                             f'{self.image_size}x{self.image_size}; this run has cameras {list(cameras)} at '
                             f'{image_size}x{image_size}: retrain it on this run\'s cameras (run train_reward)')
        if not self.state_names:
            return []
        have = list(state_names or [])
        missing = [n for n in self.state_names if n not in have]
        if missing:
            raise ValueError(f'the success classifier reads states {list(self.state_names)}; this run\'s env has '
                             f'{have or "no state names"}, without {missing}: retrain it on this robot\'s states '
                             '(run train_reward, state_inputs)')
        return [have.index(n) for n in self.state_names]


def save(model: SuccessClassifier, path: str | Path, threshold: float, metrics: dict) -> Path:
    """Write the checkpoint atomically (temporary file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    with open(tmp, 'wb') as f:
        torch.save({'format': FORMAT, 'cameras': list(model.cameras), 'image_size': model.image_size,
                    'state_names': list(model.state_names),
                    'threshold': float(threshold), 'metrics': {k: float(v) for k, v in metrics.items()},
                    'model': model.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load(path: str | Path) -> tuple[SuccessClassifier, dict]:
    """(model in eval mode, the checkpoint's metadata: cameras, image_size, state_names, threshold, metrics)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f'success classifier {path}: no such file (run train_reward writes one)')
    try:
        ck = torch.load(Path(path), map_location='cpu', weights_only=True)
    except Exception as e:  # noqa: BLE001 - not a torch file, or one that needs code to load (weights_only)
        raise ValueError(f'{path}: not a success classifier checkpoint ({FORMAT}; loaded weights_only, it holds '
                         f'tensors and plain containers only): {type(e).__name__}: {str(e)[:200]}') from e
    if not isinstance(ck, dict) or ck.get('format') != FORMAT:
        raise ValueError(f'{path}: not a success classifier checkpoint ({FORMAT})')
    model = SuccessClassifier(ck['cameras'], ck['image_size'], state_names=ck.get('state_names', ()))
    model.load_state_dict(ck['model'])
    model.eval()
    return model, {'state_names': list(model.state_names),
                   **{k: ck[k] for k in ('cameras', 'image_size', 'threshold', 'metrics')}}


__all__ = ['FORMAT', 'STD_FLOOR', 'SuccessClassifier', 'load', 'save']
