"""``run train_reward --demos DIR [DIR ...]``: the success classifier from recorded, labeled runs.

Reads every LeRobot dataset under each ``--demos`` directory (a ``real_collect`` run's
``collected_data``, a sim run's), takes the frames at and after each episode's success label
as positives and every other frame as a negative (``rewards.labels``), trains on whole episodes
and measures on held-out ones (``rewards.train``), prints precision, recall and the per-frame
false-positive rate, and writes ``success_classifier.pt`` (cameras, image size, threshold and the
figures inside) and ``metrics.json`` into ``--output-dir``. ``--config``: a YAML of
``params.reward_training`` values (train_epochs, batch_size, lr, held_out, threshold, ...).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from ..episodes.demos import find_datasets
from ..episodes.lerobot_reader import labeled_episodes
from ..rewards import classifier as rc
from ..rewards.labels import frame_targets
from ..rewards.train import config, train_classifier

CAMERA_PREFIX = 'observation.images.'
CHECKPOINT = 'success_classifier.pt'


def load_labeled(demos: list[str]) -> tuple[torch.Tensor, np.ndarray, np.ndarray, list[str]]:
    """(views [N, V, H, W, 3] uint8, targets [N], episode ids [N], camera names) of every episode
    under ``demos``; datasets whose cameras or image size differ are refused, naming both."""
    views, lengths, success_at, cameras, shape = [], [], [], None, None
    for root in demos:
        datasets = find_datasets(root)
        if not datasets:
            raise ValueError(f'no LeRobot dataset (meta/info.json) under {root}')
        for ds in datasets:
            for ep in labeled_episodes(ds):
                names = [k.removeprefix(CAMERA_PREFIX) for k in ep.frames]
                h, w = next(iter(ep.frames.values())).shape[1:3]
                if cameras is None:
                    cameras, shape = names, (h, w)
                    if h != w:
                        raise ValueError(f'{ds}: {w}x{h} images; the success classifier takes square ones (image_size)')
                if names != cameras or (h, w) != shape:
                    raise ValueError(f'{ds} records cameras {names} at {w}x{h}, an earlier dataset {cameras} at '
                                     f'{shape[1]}x{shape[0]}: train on runs with the same cameras')
                views.append(np.stack([ep.frames[k] for k in ep.frames], 1))
                lengths.append(ep.length)
                success_at.append(ep.success_at)
    if not views:
        raise ValueError(f'no episodes under {", ".join(demos)}')
    episodes = np.repeat(np.arange(len(lengths)), lengths)
    return torch.from_numpy(np.concatenate(views)), frame_targets(lengths, success_at), episodes, cameras


def main(args) -> int:
    if not args.demos:
        print('run train_reward needs --demos DIR [DIR ...] (recorded runs with success labels)', flush=True)
        return 2
    given = yaml.safe_load(Path(args.config).read_text()) if args.config else {}
    cfg = config(**(given or {}))
    out = Path(args.output_dir or f'outputs/train_reward/{time.strftime("%Y%m%d_%H%M%S")}')
    try:
        views, targets, episodes, cameras = load_labeled(args.demos)
    except (ValueError, FileNotFoundError) as e:
        print(f'train_reward: {e}', flush=True)
        return 1
    successes = sum(1 for e in np.unique(episodes) if targets[episodes == e].any())
    print(f'{len(views)} frames of {len(np.unique(episodes))} episodes ({successes} successful), cameras {cameras}, '
          f'{views.shape[2]}x{views.shape[3]}', flush=True)
    model, m = train_classifier(views, targets, episodes, cameras, cfg, log=lambda s: print(s, flush=True))
    path = rc.save(model, out / CHECKPOINT, cfg.threshold, m)
    (out / 'metrics.json').write_text(json.dumps(m, indent=1) + '\n')
    print(f"held out ({m['held_out_episodes']} episodes, threshold {cfg.threshold:g}): "
          f"precision {m['held_out_precision']:.3f} recall {m['held_out_recall']:.3f} "
          f"false-positive rate {m['held_out_false_positive_rate']:.4f}; written {path}", flush=True)
    return 0


__all__ = ['CHECKPOINT', 'load_labeled', 'main']
