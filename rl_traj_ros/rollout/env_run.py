"""The env node's rollout thread, ROS-free: make the env, run the ``EnvLoop``, close the env.

Everything that touches the env happens in this one thread: an EGL context is bound to the
thread that made it, and ``CollectEpisode`` flushes its episodes when the env is closed. The
lifecycle of a managed node maps onto it: *configure* is ``start`` (make the env, connect to
the robot; nothing moves), *activate* / *deactivate* set and clear ``active`` (the loop holds
before its next motion command), *cleanup* / *shutdown* are ``end`` (stop, flush, release).
The node gives the transport and the hooks; a test drives it with queues (``test_env_loop.py``).
A watchdog thread logs the loop's phase once it lasts over ``stall_warn_s`` (``EnvLoop.phase``).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from ..params.defaults import ENV
from ..episodes.collect_episode import env_attr
from .env_loop import EnvLoop
from .workers import EnvStats

Log = Callable[[str], None]


class EnvRunner:
    def __init__(self, make_env: Callable[[], Any], make_loop: Callable[[Any], EnvLoop],
                 before_close: Callable[[], None], after_close: Callable[[bool], None], error: Log,
                 warn: Log = print, stall_warn_s: float = ENV.stall_warn_s):
        """``make_env()`` in the thread; ``make_loop(env)`` the loop over it; ``before_close()``
        once the loop ended (the node waits for its last message's acks), ``after_close(made)``
        once the env is closed (``made``: False when making it failed)."""
        self.make_env, self.make_loop, self.error, self.warn = make_env, make_loop, error, warn
        self.stall_warn_s = stall_warn_s
        self.before_close, self.after_close = before_close, after_close
        self.stop, self.active, self._made = threading.Event(), threading.Event(), threading.Event()
        self.env: Any = None
        self.loop: Optional[EnvLoop] = None
        self.make_error: Optional[BaseException] = None
        self.thread: Optional[threading.Thread] = None
        self.t_last: Optional[float] = None
        self.exit_code, self.flushed, self.finished = 0, False, False

    def start(self, timeout_s: float) -> Optional[str]:
        """Make the env in a new thread and wait for it: None, or why not (nothing moved)."""
        if self.thread is not None:
            return 'configure after cleanup: a run ends at cleanup; start a new node'
        self.thread = threading.Thread(target=self._run, name='env-loop', daemon=True)
        self.thread.start()
        if self._made.wait(timeout_s) and self.make_error is None:
            return None
        self.stop.set()
        self.exit_code, self.finished = 1, True
        return str(self.make_error or f'no env within {timeout_s} s')

    def end(self, timeout_s: float = 60.0) -> None:
        """Stop before the next motion command, then wait while the env flushes and closes."""
        self.active.clear()
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=timeout_s)
        self.finished = True

    def _run(self) -> None:
        try:
            try:
                self.env = self.make_env()
                self.loop = self.make_loop(self.env)
            except Exception as e:  # noqa: BLE001 - start() reports it (the transition fails)
                self.make_error, self.exit_code = e, 1
                return
            finally:
                self._made.set()
            threading.Thread(target=self._watch, args=(self.loop,), name='env-loop-watchdog', daemon=True).start()
            self.loop.run()
            self.exit_code = int(self.loop.gate.failed)
        except Exception as e:  # noqa: BLE001
            self.error(f'rollout loop failed: {e!r}')
            self.exit_code = 1
        finally:
            self.t_last = time.monotonic()
            if self.loop is not None:
                self.loop.phase.enter('closing: the last acknowledgements, flushing the episodes, closing the env')
            self.before_close()
            if self.env is not None:
                self.env.close()  # in this thread (EGL); CollectEpisode flushes and finalizes here
            self.flushed = True
            self.after_close(self.make_error is None)
            self.finished = True

    def _watch(self, loop: EnvLoop) -> None:
        """Name the phase the loop is stuck in, every ``stall_warn_s`` while it is."""
        while not self.stop.wait(self.stall_warn_s / 4) and not self.flushed:
            stalled = loop.phase.stalled(self.stall_warn_s)
            if stalled and time.monotonic() - loop.phase.warned_at >= self.stall_warn_s:
                loop.phase.warned_at = time.monotonic()
                self.warn(f'rollout loop stalled? {stalled}')

    def stats(self, chunks_per_step: int) -> dict[str, float]:
        """Progress: chunks, episodes, env and loop time, time blocked on the policy's replies."""
        loop = self.loop
        s = loop.worker.stats if loop is not None else EnvStats()
        end = self.t_last if self.t_last is not None else time.monotonic()
        t_first, wait_s, rejected = (loop.t_first, loop.wait_s, loop.rejected) if loop is not None else (None, 0.0, 0)
        reward = env_attr(self.env, 'step_reward') if self.env is not None else None
        return {'steps': s.chunks // chunks_per_step, 'chunks': s.chunks, 'episodes': s.episodes,
                'successes': s.successes, 'env_s': round(s.env_time_s, 3), 'loop_s': round(end - (t_first or end), 3),
                'wait_s': round(wait_s, 3), 'active': int(self.active.is_set()), 'finished': int(self.flushed),
                'rejected': rejected, 'exit_code': self.exit_code, **(reward.stats() if reward is not None else {})}

    def running(self) -> bool:
        """An episode runs: the env is made, motion active, the run not ending (what a label can end)."""
        return self.loop is not None and self.active.is_set() and not self.stop.is_set() and not self.flushed

    def progress(self, every: int = 10) -> Optional[str]:
        """A progress line every ``every`` chunks (None between)."""
        s = self.loop.worker.stats
        if s.chunks % every:
            return None
        rate = s.successes / s.episodes if s.episodes else 0.0
        return (f'chunks={s.chunks} ({s.chunks / (time.monotonic() - s.started):.1f}/s) episodes={s.episodes} '
                f'successes={s.successes} ({rate:.0%})')


__all__ = ['EnvRunner']
