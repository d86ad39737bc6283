"""The remote reader pool: Kafka's ``remote-log-reader`` threads with a bounded queue.

Remote reads never run on the caller's (I/O, event loop) thread. ``remote.log.reader.threads``
workers take tasks from a queue of at most ``remote.log.reader.max.pending.tasks``; when it is
full a new read is refused at once with :class:`ReaderBusyError` (retriable) instead of letting
memory grow. Each read has a timeout (``remote.fetch.max.wait.ms`` by default): on expiry the
caller gets :class:`FetchTimeoutError` and a task that had not started is cancelled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from rlm.errors import FetchTimeoutError, ReaderBusyError

T = TypeVar("T")


class ReaderPool:
    """Runs remote reads on named worker threads, bounded in both threads and queued tasks."""

    def __init__(self, threads: int, max_pending: int, default_timeout_ms: int) -> None:
        self.threads = threads
        self.max_pending = max_pending
        self.default_timeout_ms = default_timeout_ms
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="remote-log-reader")
        self._slots = threading.BoundedSemaphore(threads + max_pending)
        self._lock = threading.Lock()
        self.submitted = 0
        self.rejected = 0
        self.timeouts = 0

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn``; raises :class:`ReaderBusyError` when threads and queue are all taken."""
        if not self._slots.acquire(blocking=False):
            with self._lock:
                self.rejected += 1
            raise ReaderBusyError(
                f"remote reader pool is full ({self.threads} running + {self.max_pending} queued; "
                "remote.log.reader.max.pending.tasks); retry later")
        try:
            fut = self._executor.submit(fn)
        except BaseException:
            self._slots.release()
            raise
        fut.add_done_callback(lambda _f: self._slots.release())
        with self._lock:
            self.submitted += 1
        return fut

    def run(self, fn: Callable[[], T], timeout_ms: int | None = None, what: str = "remote read") -> T:
        """Submit and wait; :class:`FetchTimeoutError` after ``timeout_ms`` (default from config)."""
        fut = self.submit(fn)
        wait_ms = self.default_timeout_ms if timeout_ms is None else timeout_ms
        try:
            return fut.result(timeout=wait_ms / 1000)
        except FutureTimeout as e:
            fut.cancel()
            with self._lock:
                self.timeouts += 1
            raise FetchTimeoutError(f"{what} did not finish within {wait_ms} ms") from e
        except CancelledError as e:
            raise FetchTimeoutError(f"{what} was cancelled") from e

    @property
    def in_use(self) -> int:
        """Running plus queued tasks (approximate)."""
        return self.threads + self.max_pending - self._slots._value

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
