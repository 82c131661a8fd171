"""The operator's episode labels, and the per-frame targets a success classifier learns from.

HIL-SERL and LeRobot's HIL recording let the operator end an episode with a key: *success*
(terminated, reward 1), *failure* (terminated, reward 0) or *re-record* (the episode is dropped
and the env resets). A success classifier is then trained on the labeled frames: the frames that
show the task done are positives, every other frame of that episode and every frame of a failed
one is a negative. Frames before the label are negatives even though the success may be near: the
label is the operator's word that it is done *now*.

Which frames show it: a dataset's frame ``k`` holds the image *before* step ``k`` and that step's
``next.reward`` / success flag, so the first image of the done task is frame ``k + 1``. An
episode that ended on its success step has no such image (the terminal observation is not a
frame); its last frame, the moment before, stands in. Recording ``steps_after_success`` frames
after each success (``rewards.step_reward``) gives the classifier real ones, and keeps the
moment before a negative: a classifier that has learned "almost lifted" as success is what RL
learns to exploit.
"""
from __future__ import annotations

import enum
from typing import Optional, Sequence

import numpy as np


class Label(enum.IntEnum):
    """The wire value of an episode event (``0`` is no label: a step without one)."""
    NONE = 0
    SUCCESS = 1
    FAILURE = 2
    RERECORD = 3

    @classmethod
    def parse(cls, value) -> 'Label':
        """A label from its wire value or name ('success', 'failure', 're-record'/'rerecord'),
        or a ValueError naming what is accepted."""
        if isinstance(value, str) and not value.strip().isdigit():
            key = value.strip().upper().replace('-', '').replace('_', '')
            if key in cls.__members__:
                return cls[key]
        else:
            try:
                return cls(int(value))
            except (TypeError, ValueError):
                pass
        raise ValueError(f'episode label must be one of success, failure, re-record (1, 2, 3), got {value!r}')


def outcome(label: Label) -> Optional[tuple[float, bool]]:
    """(reward, terminated) a label gives the step it lands on; None for re-record and no label
    (re-record drops the episode: it has no reward to give)."""
    if label == Label.SUCCESS:
        return 1.0, True
    if label == Label.FAILURE:
        return 0.0, True
    return None


def frame_targets(lengths: Sequence[int], success_at: Sequence[Optional[int]]) -> np.ndarray:
    """Per-frame classifier targets of consecutive episodes: episode ``i`` has ``lengths[i]``
    frames and its first success flag at frame ``success_at[i]`` (None: failed, or no success):
    1.0 on the frames after it (the images of the done task), or on that frame when it is the
    episode's last; 0.0 elsewhere."""
    if len(lengths) != len(success_at):
        raise ValueError(f'{len(lengths)} episode lengths but {len(success_at)} success frames')
    out = []
    for n, at in zip(lengths, success_at):
        y = np.zeros(int(n), np.float32)
        if at is not None:
            if not 0 <= at < n:
                raise ValueError(f'success label at frame {at} of an episode of {n} frames')
            y[min(at + 1, n - 1):] = 1.0
        out.append(y)
    return np.concatenate(out) if out else np.zeros(0, np.float32)


__all__ = ['Label', 'frame_targets', 'outcome']
