"""Each env step's reward, termination and success as the run's ``reward_source`` gives them.

``BatchedEnv`` calls ``decide`` for every env after its step, before its auto-reset, so an
episode that a label or the classifier ends is reset like one the env ended, and the recorder,
the replay buffer and the learner see one consistent episode.

Sources (``reward_source``):
- ``env``: the env's own reward and termination (the sim's; a real cell's ``target_ee_pose``);
- ``classifier``: the success classifier on the step's camera frames (``detector``'s threshold
  and hold); the env's reward is withheld;
- ``operator``: only the operator's labels give a reward; the env's is withheld.
The operator's label overrides every source. With the env's reward withheld, an episode the env
ends on its own (the sim's success check, an object knocked out of the workspace) is *truncated*,
not terminated: a termination there would tell the learner what the withheld reward said. A
re-record label truncates the episode with reward 0 and flags it (``rerecord``): the recorder
drops it from the dataset; the replay buffer keeps its steps as what the robot did (off-policy
data), cut there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from .classifier import SuccessClassifier
from .detector import Source, SuccessDetector
from .events import EpisodeLabels
from .labels import Label

REWARD_SOURCES = ('env', 'classifier', 'operator')


@dataclass(frozen=True)
class StepOutcome:
    reward: float
    terminated: bool
    truncated: bool
    success: bool
    source: Source
    rerecord: bool = False


def frame_views(obs: dict) -> torch.Tensor:
    """One env's observation -> [1, V, H, W, 3] uint8 (the main camera first, then the extra views)."""
    views = [np.asarray(obs['main_images'])[None]]
    if 'extra_view_images' in obs:
        views.append(np.asarray(obs['extra_view_images']))
    return torch.from_numpy(np.ascontiguousarray(np.concatenate(views)))[None]


class StepReward:
    def __init__(self, source: str, num_envs: int, labels: Optional[EpisodeLabels] = None,
                 classifier: Optional[SuccessClassifier] = None, threshold: Optional[float] = None,
                 hold: Optional[int] = None, cameras: Sequence[str] = (), image_size: Optional[int] = None):
        """``threshold``, ``hold``: the detector's (with a classifier); a classifier trained on
        other cameras or another image size than ``cameras`` / ``image_size`` is refused, naming both."""
        if source not in REWARD_SOURCES:
            raise ValueError(f'reward_source must be one of {", ".join(REWARD_SOURCES)}, got {source!r}')
        if source == 'classifier':
            if classifier is None:
                raise ValueError("reward_source 'classifier' needs reward_classifier: a checkpoint of run "
                                 'train_reward (success_classifier.pt)')
            classifier.check_matches(cameras, image_size)
        self.source, self.labels, self.classifier = source, labels, classifier if source == 'classifier' else None
        if self.classifier is None:   # the detectors then only apply labels: their threshold is never read
            threshold, hold = 0.5, 1
        self.detectors = [SuccessDetector(threshold, hold) for _ in range(num_envs)]
        self.counts = {'reward_env': 0, 'reward_classifier': 0, 'reward_operator': 0, 'episodes_rerecorded': 0,
                       'classifier_successes': 0, 'operator_labels': 0}

    @property
    def nonfinite(self) -> int:
        return sum(d.nonfinite for d in self.detectors)

    def reset(self, i: int) -> None:
        self.detectors[i].reset()

    def decide(self, i: int, obs: dict, reward: float, terminated: bool, truncated: bool,
               success: bool) -> StepOutcome:
        label = self.labels.take(i) if self.labels is not None else Label.NONE
        det = self.detectors[i]
        if self.source == 'env':
            d = det.step(reward, terminated, None, label)
            out = StepOutcome(d.reward, d.terminated, bool(truncated and not d.terminated), d.success or
                              (success and d.source == Source.ENV), d.source, d.drop)
        else:
            prob = None
            if self.classifier is not None and label == Label.NONE:
                prob = float(self.classifier.probability(frame_views(obs))[0])
            d = det.step(0.0, False, prob, label)
            source = Source.OPERATOR if self.source == 'operator' and d.source == Source.ENV else d.source
            # the env's own end, unseen by the withheld reward: cut (truncated), never terminated
            out = StepOutcome(d.reward, d.terminated, bool((terminated or truncated) and not d.terminated),
                              d.success, source, d.drop)
        if d.drop:  # re-record: cut with reward 0, dropped from the dataset
            out = StepOutcome(0.0, False, True, False, Source.OPERATOR, True)
            self.counts['episodes_rerecorded'] += 1
        self.counts[f'reward_{out.source.name.lower()}'] += 1
        self.counts['operator_labels'] += int(label != Label.NONE)
        self.counts['classifier_successes'] += int(d.source == Source.CLASSIFIER and d.success)
        return out

    def stats(self) -> dict[str, float]:
        out = dict(self.counts)
        if self.classifier is not None:
            out['classifier_nonfinite'] = self.nonfinite
        if self.labels is not None:
            out.update(self.labels.counters)
        return out


__all__ = ['REWARD_SOURCES', 'StepOutcome', 'StepReward', 'frame_views']
