"""Worker threads for ranged GETs that run what a reader waits for before what it reads ahead.

A plain FIFO pool lets read-ahead queued for one partition delay the chunk another partition's
fetch is blocked on: a consumer's first Fetch of four partitions queues each partition's chunk
*and* its read-ahead, and with four workers the fourth partition's chunk started only after
the first partitions' read-ahead — the first answer waited for 12 GETs instead of 4. Here a
demanded GET goes before every queued read-ahead, and a read-ahead GET that a reader comes to
wait for while it is still queued is moved up (:meth:`GetPool.promote`); it still runs once.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Priority(IntEnum):
    """Lower runs first."""

    DEMAND = 0  # a reader is blocked on it
    READ_AHEAD = 1  # nobody waits for it yet


@dataclass(eq=False)
class GetJob:
    """One queued GET; may sit in the queue twice (queued, then promoted), runs at most once."""

    fn: Callable[[], Any]
    priority: Priority
    future: Future[Any] = field(default_factory=Future)
    _claim: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        if not self._claim.acquire(blocking=False):  # the other queue entry ran it
            return
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = self.fn()
        except BaseException as e:  # handed to whoever waits on the future
            self.future.set_exception(e)
        else:
            self.future.set_result(result)

    @property
    def started(self) -> bool:
        return self._claim.locked()


_STOP = object()


class GetPool:
    """``workers`` daemon threads taking :class:`GetJob` s by priority, then in order of arrival."""

    def __init__(self, workers: int, name: str = "remote-get") -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Any]] = queue.PriorityQueue()
        self._seq = itertools.count()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True)
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[[], Any], priority: Priority) -> GetJob:
        if self._closed:
            raise RuntimeError("GET pool closed")
        job = GetJob(fn, priority)
        self._queue.put((int(priority), next(self._seq), job))
        return job

    def promote(self, job: GetJob) -> None:
        """A reader now waits for ``job``: run it before any read-ahead still queued."""
        if job.priority is Priority.DEMAND or job.started or self._closed:
            return
        job.priority = Priority.DEMAND
        self._queue.put((int(Priority.DEMAND), next(self._seq), job))

    def close(self) -> None:
        """Stop the workers after their current GET; queued jobs are cancelled."""
        self._closed = True
        while True:
            try:
                _, _, job = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(job, GetJob):
                job.future.cancel()
        for _ in self._threads:
            self._queue.put((-1, next(self._seq), _STOP))

    def _work(self) -> None:
        while True:
            _, _, job = self._queue.get()
            if job is _STOP:
                return
            job.run()
