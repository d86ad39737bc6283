"""One task per partition on a pool of named threads, as Kafka's RemoteLogManager schedules them.

A new partition runs at once; after a run it is due again at ``now + interval``; after a failed
run at ``now + backoff`` where backoff grows exponentially from ``backoff_base`` to
``backoff_max`` and is multiplied by a random factor in ``[1 - jitter, 1 + jitter]``. A partition
is never run by two threads at a time. A partition removed while its task runs is dropped when
the run ends. ``stop()`` stops handing out work and waits for running tasks up to a timeout.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

import structlog

from rlm.errors import RlmError

log = structlog.get_logger(__name__)


@dataclass
class _Entry:
    due: float
    seq: int
    running: bool = False
    removed: bool = False
    failures: int = 0
    once_done: bool = False


class PartitionScheduler:
    """Runs ``task(key)`` for every registered key, forever (or once per key with ``once=True``)."""

    def __init__(
        self,
        task: Callable[[Hashable], None],
        *,
        threads: int,
        interval_s: float,
        backoff_base_s: float,
        backoff_max_s: float,
        jitter: float,
        name: str = "rlm-task",
        once: bool = False,
        on_error: Callable[[Hashable, BaseException], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._task = task
        self._n = threads
        self.interval_s = interval_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.jitter = jitter
        self._name = name
        self._once = once
        self._on_error = on_error
        self._clock = clock
        self._entries: dict[Hashable, _Entry] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self.errors: list[tuple[Hashable, BaseException]] = []

    # ---- registry ------------------------------------------------------------------------
    def add(self, key: Hashable) -> None:
        with self._cond:
            e = self._entries.get(key)
            if e is not None:
                e.removed = False
                return
            self._push(key, self._clock())
            self._cond.notify()

    def remove(self, key: Hashable) -> None:
        with self._cond:
            e = self._entries.get(key)
            if e is None:
                return
            if e.running:
                e.removed = True
            else:
                del self._entries[key]

    def keys(self) -> set[Hashable]:
        with self._cond:
            return {k for k, e in self._entries.items() if not e.removed}

    def sync(self, keys: Iterable[Hashable]) -> None:
        """Make the registered set equal to ``keys``."""
        wanted = set(keys)
        for k in wanted - self.keys():
            self.add(k)
        for k in self.keys() - wanted:
            self.remove(k)

    def backoff(self, failures: int) -> float:
        base = min(self.backoff_max_s, self.backoff_base_s * (2 ** max(0, failures - 1)))
        return float(base * random.uniform(1 - self.jitter, 1 + self.jitter))

    def _push(self, key: Hashable, due: float) -> None:
        seq = next(self._seq)
        e = self._entries.get(key)
        if e is None:
            self._entries[key] = _Entry(due, seq)
        else:
            e.due, e.seq = due, seq
        heapq.heappush(self._heap, (due, seq, key))

    # ---- workers ---------------------------------------------------------------------------
    def start(self) -> None:
        for i in range(self._n):
            t = threading.Thread(target=self._worker, name=f"{self._name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def _next(self) -> Hashable | None:
        with self._cond:
            while not self._stopping:
                now = self._clock()
                while self._heap:
                    due, seq, key = self._heap[0]
                    e = self._entries.get(key)
                    if e is None or e.seq != seq or e.running or e.once_done:
                        heapq.heappop(self._heap)
                        continue
                    if due > now:
                        break
                    heapq.heappop(self._heap)
                    e.running = True
                    return key
                if self._once and self._all_done():
                    self._cond.notify_all()
                    return None
                wait = self._heap[0][0] - now if self._heap else 1.0
                self._cond.wait(timeout=max(0.005, min(wait, 1.0)))
            return None

    def _all_done(self) -> bool:
        return all(e.once_done or e.removed for e in self._entries.values())

    def _worker(self) -> None:
        while True:
            key = self._next()
            if key is None:
                return
            ok = True
            try:
                self._task(key)
            except Exception as exc:
                ok = False
                self.errors.append((key, exc))
                retriable = isinstance(exc, RlmError) and exc.retriable
                (log.warning if retriable else log.error)(
                    "task_failed",
                    key=str(key),
                    error=str(exc),
                    kind=type(exc).__name__,
                    retriable=retriable,
                    exc_info=not isinstance(exc, RlmError),
                )
                if self._on_error is not None:
                    self._on_error(key, exc)
            with self._cond:
                e = self._entries.get(key)
                if e is not None:
                    e.running = False
                    if e.removed:
                        del self._entries[key]
                    elif self._once:
                        e.once_done = True
                    else:
                        e.failures = 0 if ok else e.failures + 1
                        delay = self.interval_s if ok else self.backoff(e.failures)
                        self._push(key, self._clock() + delay)
                self._cond.notify_all()

    # ---- lifecycle -------------------------------------------------------------------------
    def wait_once(self, timeout: float | None = None) -> bool:
        """``once`` mode: wait until every registered key has run once."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._all_done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(timeout=0.2 if left is None else min(left, 0.2))
        return True

    def stop(self, timeout: float, abort: threading.Event | None = None) -> bool:
        """Stop dispatching; True when every running task ended within ``timeout``. Setting
        ``abort`` (a forced stop) ends the wait early; running tasks are then abandoned."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            while t.is_alive() and time.monotonic() < deadline and not (abort and abort.is_set()):
                t.join(min(0.1, max(0.0, deadline - time.monotonic())))
        return not any(t.is_alive() for t in self._threads)

    def running(self) -> int:
        with self._cond:
            return sum(1 for e in self._entries.values() if e.running)
