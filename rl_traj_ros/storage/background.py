"""One background writer thread with a bounded queue: the shared mechanism behind the replay
buffer's trajectory files and CollectEpisode's episode exports.

Why one thread: writes stay in submission order (index after file, episodes in order) and the
training loop never blocks on disk. Why bounded: a producer faster than the disk is slowed
down (or told, with ``block=False``) instead of growing memory. A failure is never lost: a
fatal error is kept for the owner to raise on its next call; with ``retry_os_errors`` an
OSError (disk full, I/O error) is retried with backoff and reported through ``stalled``.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Optional


class QueueFull(RuntimeError):
    """``submit(block=False)`` found the queue full."""


class BackgroundWriter:
    def __init__(self, handle: Callable[[Any], None], max_pending: int, name: str = 'writer',
                 retry_os_errors: bool = False, retry_s: float = 0.5):
        self._q: queue.Queue = queue.Queue(maxsize=max(1, max_pending))
        self._handle = handle
        self.retry_os_errors, self.retry_s = retry_os_errors, retry_s
        self.error: Optional[BaseException] = None      # fatal: the owner re-raises it
        self.stalled: Optional[OSError] = None          # transient: being retried
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                delay = self.retry_s
                while self.error is None:  # after a fatal error, later items are not written
                    try:
                        self._handle(item)
                        self.stalled = None
                        break
                    except OSError as e:
                        if not self.retry_os_errors or self._closing:
                            raise
                        self.stalled = e
                        time.sleep(delay)
                        delay = min(delay * 2, 5.0)
            except BaseException as e:  # noqa: BLE001 - kept for the owner's next call
                self.error = e
            finally:
                self._q.task_done()

    def submit(self, item: Any, block: bool = True) -> None:
        try:
            self._q.put(item, block=block)
        except queue.Full:
            raise QueueFull('background writer queue is full') from None

    def full(self) -> bool:
        return self._q.full()

    def take_error(self) -> Optional[BaseException]:
        err, self.error = self.error, None
        return err

    def join(self) -> None:
        """Wait until everything submitted so far was handled (or failed)."""
        self._q.join()

    def close(self) -> None:
        self._closing = True
        self._q.put(None)
        self._thread.join()
