"""Each env step's reward, termination and success as the run's ``reward_source`` gives them.

``BatchedEnv`` calls ``decide`` for every env after its step, before its auto-reset, so an
episode that a label or the classifier ends is reset like one the env ended, and the recorder,
the replay buffer and the learner see one consistent episode.

Sources (``reward_source``):
- ``env``: the env's own reward and termination (the sim's; a real cell's ``target_ee_pose``);
- ``classifier``: the success classifier on the step's camera frames (``detector``'s threshold
  and hold); the env's reward is withheld;
- ``operator``: only the operator's labels give a reward; the env's is withheld.
The operator's label overrides every source. With the env's reward withheld, the env's own success
check neither rewards nor ends the episode: a real cell has none, and a sim episode cut at its
success step would end before the classifier sees what it learned a success looks like (the frames
after it), so only the classifier's errors could ever reward. Any other end of the env's (an object
knocked out of the workspace, its time limit) *truncates* the episode, never terminates it: a
termination there would tell the learner what the withheld reward said. A
re-record label truncates the episode with reward 0 and flags it (``rerecord``): the recorder
drops it from the dataset; the replay buffer keeps its steps as what the robot did (off-policy
data), cut there.

``steps_after_success`` (LeRobot's ``number_of_steps_after_success``): a success does not end the
episode at once; it goes on for that many steps, each a success with the success's reward and
source, and the last one terminates. A dataset then holds frames that *show* the task done:
LeRobot's frame ``k`` is the image before step ``k``, so an episode that ends on its success step
has no image of the success, and a classifier trained on it learns the moment before it (which
RL then provokes). During the tail a re-record or failure label drops the episode (its frames
were recorded as successes), a success label ends it there.

``operator_delay`` >= 0 (the sim's ``sim_operator_delay``): a scripted operator watches the sim and
offers a success label to ``labels`` that many steps after the sim's check first passes in an
episode, through the same path as a person's (``EpisodeLabels``: taken at the env's next step), so
``reward_source: operator`` runs in the sim as on a real cell, with the sim's check only watched.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from ..params.defaults import ENV
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
                 hold: Optional[int] = None, cameras: Sequence[str] = (), image_size: Optional[int] = None,
                 steps_after_success: int = ENV.steps_after_success, operator_delay: int = ENV.sim_operator_delay):
        """``threshold``, ``hold``: the detector's (with a classifier); a classifier trained on
        other cameras or another image size than ``cameras`` / ``image_size`` is refused, naming both."""
        if steps_after_success < 0:
            raise ValueError(f'steps_after_success must be 0 or more, got {steps_after_success}')
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
        self.steps_after_success = int(steps_after_success)
        self.tails: list[Optional[list]] = [None] * num_envs   # [steps left, reward, source] after a success
        self.counts = {'reward_env': 0, 'reward_classifier': 0, 'reward_operator': 0, 'episodes_rerecorded': 0,
                       'classifier_successes': 0, 'operator_labels': 0, 'steps_after_success': 0}
        if operator_delay >= 0 and labels is None:
            raise ValueError('sim_operator_delay needs the label path (EpisodeLabels) to offer its labels to')
        self.operator_delay = int(operator_delay)
        self.watched: list[Optional[int]] = [None] * num_envs   # steps since the sim's check passed
        if self.operator_delay >= 0:
            self.counts.update(scripted_labels=0, scripted_labels_refused=0)

    @property
    def nonfinite(self) -> int:
        return sum(d.nonfinite for d in self.detectors)

    def reset(self, i: int) -> None:
        self.detectors[i].reset()
        self.tails[i] = self.watched[i] = None

    def decide(self, i: int, obs: dict, reward: float, terminated: bool, truncated: bool,
               success: bool) -> StepOutcome:
        label = self.labels.take(i) if self.labels is not None else Label.NONE
        self.counts['operator_labels'] += int(label != Label.NONE)
        if self.operator_delay >= 0 and label == Label.NONE and self.tails[i] is None:
            self._watch(i, success)
        if self.tails[i] is not None:
            return self._tail_step(i, label, truncated)
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
            # the env's own success goes on unseen; its other ends cut the episode (truncated), never terminate it
            cut = truncated or (terminated and not success)
            out = StepOutcome(d.reward, d.terminated, bool(cut and not d.terminated), d.success, source, d.drop)
        if d.drop:  # re-record: cut with reward 0, dropped from the dataset
            out = self._drop()
        elif out.success and out.terminated and self.steps_after_success and not truncated:   # (not at the env's limit)
            self.tails[i] = [self.steps_after_success, out.reward, out.source]
            out = StepOutcome(out.reward, False, False, True, out.source)
        self.counts[f'reward_{out.source.name.lower()}'] += 1
        self.counts['classifier_successes'] += int(d.source == Source.CLASSIFIER and d.success)
        return out

    def _watch(self, i: int, success: bool) -> None:
        """The scripted operator: a success label once the sim's check passed ``operator_delay`` steps ago."""
        if self.watched[i] is None and not success:
            return
        self.watched[i] = 0 if self.watched[i] is None else self.watched[i] + 1
        if self.watched[i] == self.operator_delay:
            why = self.labels.offer(Label.SUCCESS, i, self.labels.clock_ns(), f'sim_operator/{i}')
            self.counts['scripted_labels' if why is None else 'scripted_labels_refused'] += 1

    def _drop(self) -> StepOutcome:
        self.counts['episodes_rerecorded'] += 1
        return StepOutcome(0.0, False, True, False, Source.OPERATOR, True)

    def _tail_step(self, i: int, label: Label, truncated: bool) -> StepOutcome:
        """A step of the tail after a success: a success again; the last one, the env's time
        limit or a success label terminates; a failure or re-record label drops the episode."""
        tail = self.tails[i]
        if label in (Label.FAILURE, Label.RERECORD):
            self.tails[i] = None
            out = self._drop()
        else:
            tail[0] -= 1
            end = tail[0] <= 0 or truncated or label == Label.SUCCESS
            out = StepOutcome(tail[1], end, False, True, Source.OPERATOR if label == Label.SUCCESS else tail[2])
            if end:
                self.tails[i] = None
        self.counts[f'reward_{out.source.name.lower()}'] += 1
        self.counts['steps_after_success'] += int(not out.rerecord)
        return out

    def stats(self) -> dict[str, float]:
        out = dict(self.counts)
        if self.classifier is not None:
            out['classifier_nonfinite'] = self.nonfinite
        if self.labels is not None:
            out.update(self.labels.counters)
        return out


__all__ = ['REWARD_SOURCES', 'StepOutcome', 'StepReward', 'frame_views']
