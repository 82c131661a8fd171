"""Training the success classifier on the operator's labeled episodes, measured on held-out ones.

The split is by episode, never by frame: neighbouring frames of one episode are near copies, so
a frame split would measure memory, not the success a new episode shows. Each camera's head
learns the label from its view alone (``classifier``: a success needs them all). Positives are rare
(the frames after a success label), so the loss weighs them by the negatives-to-positives ratio,
and the images are shifted by a few pixels per batch (DrQ's random shift) so the model cannot key
on the exact pixel of a fixed camera. The figures that matter for a reward: precision (a false
success ends an episode with reward 1, which RL exploits), recall, and the false-positive rate
per frame, at the threshold the run will use.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..params.defaults import REWARD_TRAIN
from ..params.reward_training import REWARD_TRAINING
from ..params.spec import Config, resolve
from .classifier import SuccessClassifier


def split_episodes(episodes: np.ndarray, held_out: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame masks (train, held out): whole episodes, at least one in each when there are two."""
    ids = np.unique(episodes)
    if len(ids) < 2:
        raise ValueError(f'training the success classifier needs at least 2 labeled episodes, got {len(ids)}')
    rng = np.random.default_rng(seed)
    n_out = min(len(ids) - 1, max(1, round(held_out * len(ids))))
    out = rng.permutation(ids)[:n_out]
    test = np.isin(episodes, out)
    return ~test, test


def _shift(x: torch.Tensor, px: int, gen: torch.Generator) -> torch.Tensor:
    """[N, V, H, W, 3] uint8 -> the same, each frame translated by up to ``px`` (edge padding)."""
    if px <= 0:
        return x
    n, v, h, w, c = x.shape
    flat = x.permute(0, 1, 4, 2, 3).reshape(n, v * c, h, w).float()
    padded = F.pad(flat, (px, px, px, px), mode='replicate')
    dx, dy = (torch.randint(0, 2 * px + 1, (n,), generator=gen) for _ in range(2))
    out = torch.stack([padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])
    return out.reshape(n, v, c, h, w).permute(0, 1, 3, 4, 2).to(torch.uint8)


def metrics(prob: np.ndarray, target: np.ndarray, threshold: float) -> dict[str, float]:
    """Precision, recall and false-positive rate of ``prob >= threshold`` against the labels."""
    pred, pos = prob >= threshold, target >= 0.5
    tp, fp = int((pred & pos).sum()), int((pred & ~pos).sum())
    fn, tn = int((~pred & pos).sum()), int((~pred & ~pos).sum())
    return {'precision': tp / (tp + fp) if tp + fp else float('nan'), 'recall': tp / (tp + fn) if tp + fn else float('nan'),
            'false_positive_rate': fp / (fp + tn) if fp + tn else float('nan'),
            'accuracy': (tp + tn) / max(1, len(target)), 'positives': tp + fn, 'negatives': fp + tn}


def train_classifier(views: torch.Tensor, targets: np.ndarray, episodes: np.ndarray, cameras: Sequence[str],
                     cfg: Config = REWARD_TRAIN, log=print) -> tuple[SuccessClassifier, dict[str, float]]:
    """Train on the training episodes' frames; return the model and its held-out figures
    (``held_out_*``), plus the training set's (``train_*``) and the time it took. ``cfg``:
    ``params.reward_training`` (``config(train_epochs=...)`` overrides, range-checked)."""
    if not (len(views) == len(targets) == len(episodes)):
        raise ValueError(f'{len(views)} frames, {len(targets)} targets, {len(episodes)} episode ids: one each')
    targets, episodes = np.asarray(targets, np.float32), np.asarray(episodes)
    train_m, test_m = split_episodes(episodes, cfg.held_out, cfg.seed)
    model = SuccessClassifier(cameras, views.shape[2], cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    x_train, y_train = views[torch.from_numpy(train_m)], torch.from_numpy(targets[train_m])
    pos = float(y_train.sum())
    if pos == 0 or pos == len(y_train):
        raise ValueError(f'the training episodes have {int(pos)} success frames of {len(y_train)}: '
                         'the classifier needs both successful and failed (or not yet done) frames')
    pos_weight = torch.tensor((len(y_train) - pos) / pos)
    gen = torch.Generator().manual_seed(cfg.seed)
    t0 = time.monotonic()
    model.train()
    for epoch in range(cfg.train_epochs):
        order, total = torch.randperm(len(y_train), generator=gen), 0.0
        for i in range(0, len(order), cfg.batch_size):
            idx = order[i:i + cfg.batch_size]
            logits = model.view_logits(_shift(x_train[idx], cfg.shift_px, gen))   # each camera to the label
            loss = F.binary_cross_entropy_with_logits(logits, y_train[idx, None].expand_as(logits),
                                                      pos_weight=pos_weight)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        log(f'epoch {epoch + 1}/{cfg.train_epochs}: loss {total / len(order):.4f}')
    model.eval()
    out = {'train_s': time.monotonic() - t0, 'threshold': cfg.threshold,
           'train_episodes': len(np.unique(episodes[train_m])), 'held_out_episodes': len(np.unique(episodes[test_m]))}
    for name, m in (('train', train_m), ('held_out', test_m)):
        prob = model.probability(views[torch.from_numpy(m)]).numpy()
        out.update({f'{name}_{k}': v for k, v in metrics(prob, targets[m], cfg.threshold).items()})
    return model, out


def config(**given) -> Config:
    return resolve(REWARD_TRAINING, given)


__all__ = ['config', 'metrics', 'split_episodes', 'train_classifier']
