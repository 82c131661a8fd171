"""The operator's episode labels on their way from a device or a ROS tool to the env's next step.

A label arrives on a thread of its own (a teleop topic, a service call) while the rollout thread
steps the envs; ``EpisodeLabels`` keeps it until the step of its env takes it, so the label ends
the episode at the step that follows the operator's press, the one the operator saw. A label is
refused, with a line saying why, when no episode runs (before the first reset, after the run's
end: nothing to end), for an env this node does not have, when it is not newer than the last one
from the same device (a replayed message), or when a label is already waiting for that env (one
press, one end: a chord held down must not end two episodes).
"""
from __future__ import annotations

import threading
from typing import Callable, Optional

from .labels import Label

FRESH_S = 60.0   # a label stamped further than this from the env node's clock is refused (a replay)


class EpisodeLabels:
    def __init__(self, num_envs: int, running: Callable[[], bool], clock_ns: Callable[[], int]):
        """``running()``: an episode runs now (the env made, motion active, not stopping)."""
        self.num_envs, self.running, self.clock_ns = int(num_envs), running, clock_ns
        self._pending: list[Label] = [Label.NONE] * self.num_envs
        self._last_stamp: dict[str, int] = {}
        self._lock = threading.Lock()
        self.counters = {'labels_taken': 0, 'labels_refused': 0}

    def offer(self, label, env_index: int, stamp_ns: int, source: str = '') -> Optional[str]:
        """Keep ``label`` for ``env_index`` (-1: every env of this node); or why not, to be logged."""
        why = self._check(label, env_index, stamp_ns, source)
        if why is not None:
            self.counters['labels_refused'] += 1
            return f'refused episode label {label!r} for env {env_index} from {source or "a tool"}: {why}'
        return None

    def _check(self, label, env_index: int, stamp_ns: int, source: str) -> Optional[str]:
        try:
            label = Label.parse(label)
        except ValueError as e:
            return str(e)
        if label == Label.NONE:
            return 'no label (0) is not an event'
        if not -1 <= env_index < self.num_envs:
            return f'this env node has envs 0..{self.num_envs - 1} (or -1 for all), not {env_index}'
        age_s = (self.clock_ns() - stamp_ns) / 1e9
        if not -FRESH_S < age_s < FRESH_S:
            return f'stamped {age_s:.1f} s from this node\'s clock (more than {FRESH_S:g} s: a replay or a wrong clock)'
        with self._lock:
            if stamp_ns <= self._last_stamp.get(source, 0):
                return 'stamped no later than its last label (a replay?)'
            if not self.running():
                return 'no episode is running (the env is not made, not active, or the run is ending)'
            rows = range(self.num_envs) if env_index < 0 else [env_index]
            if any(self._pending[i] != Label.NONE for i in rows):
                return 'a label for that env is still waiting for its step'
            self._last_stamp[source] = stamp_ns
            for i in rows:
                self._pending[i] = label
            self.counters['labels_taken'] += 1
        return None

    def take(self, i: int) -> Label:
        """Env ``i``'s waiting label (NONE if none), cleared: the step that calls this applies it."""
        with self._lock:
            label, self._pending[i] = self._pending[i], Label.NONE
        return label


__all__ = ['EpisodeLabels', 'FRESH_S']
