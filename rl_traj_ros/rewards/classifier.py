"""A binary success classifier over the run's cameras, and its checkpoint.

LeRobot's ``reward_classifier`` puts a head on a pretrained ResNet-10 from a hub; nothing is
downloaded here, so the model is the package's own small CNN (``policies.nets.conv_trunk``), one
trunk and one head per camera, trained from scratch on the operator's labeled frames
(``rewards.train``), each camera's head to tell success from its view alone. A frame is a success
only when every camera says so (its logit is the smallest of the cameras'): RL provokes whatever a
classifier mistakes for success, and one view is easy to fool where two together are not: the
open gripper a hand's width from an unlifted cube fills a wrist camera like a grasp, while the
front camera shows the cube on the table. Measured on the bench's labels (20 demos, noisy-expert
failures, 14 held-out episodes): one head over both cameras' features, precision 0.82 and recall
0.98 per frame, and RL found its false successes within 10 minutes; every camera agreeing,
precision 1.00 and recall 0.80, and RL from pixels on its reward reached 90 %
of held-out episodes in 45 minutes, 0-2 of 20 per snapshot hacked (docs/benchmarks.md has the runs).

The checkpoint names the cameras, in order, and the image size it was trained on: a classifier
fed another camera's view, or a resized image, gives confident nonsense, so a run whose cameras
or size differ is refused (``check_matches``), naming both. It loads with ``weights_only=True``
(tensors and plain containers only: a checkpoint file cannot run code).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from ..params.defaults import REWARD_TRAIN
from ..policies.nets import CONV_FEATURES, conv_trunk, seeded

FORMAT = 'rl_traj_ros.success_classifier/2'  # /1: one head over every camera
HIDDEN = 64


class SuccessClassifier(nn.Module):
    """[N, V, H, W, 3] uint8 views (``policies.keypoints.camera_views`` order) -> [N] logits, the
    least confident camera's (``view_logits``: each camera's)."""

    def __init__(self, cameras: Sequence[str], image_size: int, seed: int = REWARD_TRAIN.seed):
        super().__init__()
        if not cameras:
            raise ValueError('a success classifier needs at least one camera')
        self.cameras, self.image_size = tuple(cameras), int(image_size)
        with seeded(seed):
            self.trunks = nn.ModuleList(nn.Sequential(*conv_trunk()) for _ in self.cameras)
            self.heads = nn.ModuleList(nn.Sequential(nn.Linear(CONV_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
                                       for _ in self.cameras)

    def view_logits(self, views: torch.Tensor) -> torch.Tensor:
        """[N, V] logits: each camera's own verdict (what training fits, each to the label)."""
        if views.dim() != 5 or views.shape[1] != len(self.cameras):
            raise ValueError(f'the success classifier takes [N, {len(self.cameras)}, H, W, 3] views '
                             f'({", ".join(self.cameras)}), got {list(views.shape)}')
        x = views.to(torch.float32).div(255.0).permute(0, 1, 4, 2, 3)
        return torch.cat([h(t(x[:, v])) for v, (t, h) in enumerate(zip(self.trunks, self.heads))], 1)

    def forward(self, views: torch.Tensor) -> torch.Tensor:
        return self.view_logits(views).min(1).values

    @torch.no_grad()
    def probability(self, views: torch.Tensor, batch: int = 256) -> torch.Tensor:
        """Success probabilities of many frames, in slices that bound the memory."""
        was = self.training
        self.eval()
        try:
            return torch.cat([torch.sigmoid(self(views[i:i + batch])) for i in range(0, views.shape[0], batch)]) \
                if views.shape[0] else torch.zeros(0)
        finally:
            self.train(was)

    def check_matches(self, cameras: Sequence[str], image_size: int) -> None:
        """Refuse a run whose cameras (names, order) or image size differ from the training's."""
        if tuple(cameras) != self.cameras or int(image_size) != self.image_size:
            raise ValueError(f'the success classifier was trained on cameras {list(self.cameras)} at '
                             f'{self.image_size}x{self.image_size}; this run has cameras {list(cameras)} at '
                             f'{image_size}x{image_size}: retrain it on this run\'s cameras (run train_reward)')


def save(model: SuccessClassifier, path: str | Path, threshold: float, metrics: dict) -> Path:
    """Write the checkpoint atomically (temporary file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    with open(tmp, 'wb') as f:
        torch.save({'format': FORMAT, 'cameras': list(model.cameras), 'image_size': model.image_size,
                    'threshold': float(threshold), 'metrics': {k: float(v) for k, v in metrics.items()},
                    'model': model.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load(path: str | Path) -> tuple[SuccessClassifier, dict]:
    """(model in eval mode, the checkpoint's metadata: cameras, image_size, threshold, metrics)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f'success classifier {path}: no such file (run train_reward writes one)')
    try:
        ck = torch.load(Path(path), map_location='cpu', weights_only=True)
    except Exception as e:  # noqa: BLE001 - not a torch file, or one that needs code to load (weights_only)
        raise ValueError(f'{path}: not a success classifier checkpoint ({FORMAT}; loaded weights_only, it holds '
                         f'tensors and plain containers only): {type(e).__name__}: {str(e)[:200]}') from e
    if isinstance(ck, dict) and ck.get('format') == 'rl_traj_ros.success_classifier/1':
        raise ValueError(f'{path}: a success classifier of the old format (one head over every camera): '
                         f'retrain it with run train_reward ({FORMAT}: a head per camera)')
    if not isinstance(ck, dict) or ck.get('format') != FORMAT:
        raise ValueError(f'{path}: not a success classifier checkpoint ({FORMAT})')
    model = SuccessClassifier(ck['cameras'], ck['image_size'])
    model.load_state_dict(ck['model'])
    model.eval()
    return model, {k: ck[k] for k in ('cameras', 'image_size', 'threshold', 'metrics')}


__all__ = ['FORMAT', 'SuccessClassifier', 'load', 'save']
