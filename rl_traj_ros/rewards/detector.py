"""Each step's reward and termination on a cell whose env gives no task reward.

Three sources, in order of authority: the operator's label (always wins: a person saw it), the
success classifier (its probability must stay at or over ``threshold`` for ``hold`` consecutive
frames before a success counts: one bright frame, a hand in view, must not end an episode with
reward 1, which RL would learn to provoke), and the env's own reward (the sim's, or a real
cell's ``target_ee_pose``). Every decision says which source gave it, and the run stores it with
the step, so a dataset shows what it learned from.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Optional

from ..episodes.record import REWARD_FROM_ENV
from .labels import Label, outcome


class Source(enum.IntEnum):
    """What gave a step's reward; its value is the dataset's ``complementary_info.reward_source``."""
    ENV = REWARD_FROM_ENV
    CLASSIFIER = 1
    OPERATOR = 2


@dataclass(frozen=True)
class Decision:
    reward: float
    terminated: bool
    source: Source
    drop: bool = False      # re-record: the episode is discarded and the env resets
    success: bool = False


class SuccessDetector:
    def __init__(self, threshold: float, hold: int):
        """``threshold``: the checkpoint's (what it was measured at) unless the run overrides it."""
        if not 0.0 < threshold < 1.0:
            raise ValueError(f'reward classifier threshold must be in (0, 1), got {threshold}')
        if hold < 1:
            raise ValueError(f'reward classifier hold must be at least 1 frame, got {hold}')
        self.threshold, self.hold = float(threshold), int(hold)
        self.run = 0  # consecutive frames at or over the threshold in this episode
        self.nonfinite = 0  # NaN / inf scores: counted, never a success, and they break the hold

    def reset(self) -> None:
        """A new episode: no frame counts toward the hold yet."""
        self.run = 0

    def step(self, env_reward: float, env_terminated: bool, probability: Optional[float] = None,
             label: Label = Label.NONE) -> Decision:
        """The step's decision; ``probability`` None: no classifier (the env's reward stands)."""
        if label == Label.RERECORD:
            self.reset()
            return Decision(0.0, True, Source.OPERATOR, drop=True)
        given = outcome(label)
        if given is not None:
            self.reset()
            return Decision(given[0], given[1], Source.OPERATOR, success=label == Label.SUCCESS)
        if probability is None:
            return Decision(float(env_reward), bool(env_terminated), Source.ENV, success=bool(env_terminated and env_reward > 0))
        if not math.isfinite(probability):
            self.nonfinite += 1
            self.run = 0
            return Decision(0.0, False, Source.CLASSIFIER)
        self.run = self.run + 1 if probability >= self.threshold else 0
        if self.run >= self.hold:
            self.reset()
            return Decision(1.0, True, Source.CLASSIFIER, success=True)
        return Decision(0.0, False, Source.CLASSIFIER)


__all__ = ['Decision', 'Source', 'SuccessDetector']
