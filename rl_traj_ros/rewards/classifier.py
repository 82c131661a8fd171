"""A binary success classifier over the run's cameras, and its checkpoint.

LeRobot's ``reward_classifier`` puts a head on a pretrained ResNet-10 from a hub; nothing is
downloaded here, so the model is the package's own small CNN (``policies.nets.conv_trunk``), one
trunk per camera (a front and a wrist view see different things), trained from scratch on the
operator's labeled frames (``rewards.train``). It outputs one logit per frame: the probability
that the task is done in it.

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

FORMAT = 'rl_traj_ros.success_classifier/1'
HIDDEN = 64


class SuccessClassifier(nn.Module):
    """[N, V, H, W, 3] uint8 views (``policies.keypoints.camera_views`` order) -> [N] logits."""

    def __init__(self, cameras: Sequence[str], image_size: int, seed: int = REWARD_TRAIN.seed):
        super().__init__()
        if not cameras:
            raise ValueError('a success classifier needs at least one camera')
        self.cameras, self.image_size = tuple(cameras), int(image_size)
        with seeded(seed):
            self.trunks = nn.ModuleList(nn.Sequential(*conv_trunk()) for _ in self.cameras)
            self.head = nn.Sequential(nn.Linear(len(self.cameras) * CONV_FEATURES, HIDDEN), nn.ReLU(),
                                      nn.Linear(HIDDEN, 1))

    def forward(self, views: torch.Tensor) -> torch.Tensor:
        if views.dim() != 5 or views.shape[1] != len(self.cameras):
            raise ValueError(f'the success classifier takes [N, {len(self.cameras)}, H, W, 3] views '
                             f'({", ".join(self.cameras)}), got {list(views.shape)}')
        x = views.to(torch.float32).div(255.0).permute(0, 1, 4, 2, 3)
        return self.head(torch.cat([t(x[:, v]) for v, t in enumerate(self.trunks)], 1)).squeeze(1)

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
    if not isinstance(ck, dict) or ck.get('format') != FORMAT:
        raise ValueError(f'{path}: not a success classifier checkpoint ({FORMAT})')
    model = SuccessClassifier(ck['cameras'], ck['image_size'])
    model.load_state_dict(ck['model'])
    model.eval()
    return model, {k: ck[k] for k in ('cameras', 'image_size', 'threshold', 'metrics')}


__all__ = ['FORMAT', 'SuccessClassifier', 'load', 'save']
