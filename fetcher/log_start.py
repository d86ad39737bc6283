"""The partition's log start offset, and the plan every face reads through, bounded by it.

Records below the log start were deleted (``DeleteRecords``, or remote retention) and must never
be served again. The log start is ``max(remote log start, bound)`` where the bound is the largest
of (see :class:`LogStart`):

* the value the daemon published beside the segments (:mod:`rsm_plugins.log_start`) — the only
  source a reader with neither log dir nor broker has;
* the log dir's ``log-start-offset-checkpoint`` entry, when ``log_dirs`` are configured;
* the broker's ListOffsets EARLIEST, when ``bootstrap_servers`` is configured;

each broker value counted only when local retention cannot explain it
(:func:`rlm.log.log_start.deletion_bound`). The bound is applied by cutting the lineage plan
(:func:`bounded_plan`): links wholly below it are dropped and the first one starts at it, so
fetch (out of range below it), offset lookups (earliest, timestamps), scans, Spark and the HTTP
and Kafka faces — which all read through :meth:`fetcher.RemoteFetcher.plan` — agree without
each re-checking it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from fetcher.broker import BrokerOffsets
from fetcher.get_pool import GetPool, Priority
from fetcher.planning import PartitionPlan
from rlm.errors import (
    LogFormatError,
    MetadataUnavailableError,
    RemoteStorageError,
    RemoteStorageIntegrityError,
)
from rlm.log import read_partition_metadata
from rlm.log.log_start import checkpoint_log_start, deletion_bound, first_segment_offset
from rlm.types import TopicIdPartition, TopicPartition
from rsm_plugins.api import RemoteStorageManager

log = structlog.get_logger(__name__)

#: After the broker did not answer, its log start is not asked again for this long.
_BROKER_RETRY_S = 30.0


@dataclass(frozen=True, slots=True)
class BoundedPlan(PartitionPlan):
    """A plan cut at the partition's log start. ``floor`` is that log start: with every remote
    segment below it, the plan is empty and its range is ``[floor, floor)``."""

    floor: int = 0

    @property
    def log_start(self) -> int:
        return self.segments[0].first if self.segments else self.floor


def bounded_plan(plan: PartitionPlan, log_start: int) -> PartitionPlan:
    """``plan`` without offsets below ``log_start`` (unchanged when nothing is below it)."""
    if log_start <= plan.log_start:
        return plan
    links = tuple(replace(s, first=max(s.first, log_start)) for s in plan.segments if s.last >= log_start)
    first = links[0].first if links else log_start
    gaps = tuple(g for g in plan.gaps if g[0] > first)
    return BoundedPlan(plan.tp, links, plan.lineage, gaps, floor=log_start)


@dataclass(frozen=True, slots=True)
class LogStart:
    """The partition's log start (``offset``) and what each source said (``None``: no answer or
    not counted). ``remote`` is the first offset on the remote lineage (0 when nothing is remote)."""

    offset: int
    remote: int
    published: int | None
    log_dir: int | None
    broker: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"log_start_offset": self.offset, "remote_log_start_offset": self.remote,
                "published": self.published, "log_dir": self.log_dir, "broker": self.broker}


class LogStartSources:
    """Asks the sources for one partition's bound, at most once per ``refresh_s`` (the answer
    never moves back: a process keeps the highest bound it saw). Thread-safe.

    Asking means a GET (the published object) and maybe a ListOffsets, which under load take tens
    of milliseconds; a read that found its partition's answer expired used to wait for them (a
    consumer's first Fetch, every ``refresh_s`` of a long read, and every Metadata request). So:

    * **refresh ahead** — an answer used when it is over half its life old is still returned (it
      is younger than ``refresh_s``, as before) and asked again in the background, so a partition
      being read keeps a fresh answer and its reads never wait for the sources; no answer older
      than ``refresh_s`` is ever returned (an expired one is asked for while the caller waits);
    * **one ask at a time per partition** — callers that find the same answer expired wait for
      one ask instead of each sending their own.
    """

    #: an answer older than this share of ``refresh_s`` is asked again in the background when used
    AHEAD = 0.5

    def __init__(self, rsm: RemoteStorageManager, *, broker: BrokerOffsets | None = None,
                 log_dirs: list[Path] | None = None, refresh_s: float = 5.0,
                 broker_timeout_s: float = 2.0, background_workers: int = 2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rsm = rsm
        self._clock = clock
        self.broker = broker
        self.log_dirs = list(log_dirs or [])
        self.refresh_s = refresh_s
        self.broker_timeout_s = broker_timeout_s
        self._cache: dict[TopicIdPartition, tuple[float, LogStart]] = {}
        self._high: dict[TopicIdPartition, int] = {}
        self._broker_down_until = 0.0
        self._lock = threading.Lock()
        #: held while one partition's sources are asked (a caller's or a background ask)
        self._asking: dict[TopicIdPartition, threading.Lock] = {}
        self._workers = background_workers
        self._background: GetPool | None = None  # daemon threads: never hold up an exit
        self._queued: set[Future[None]] = set()
        self._closed = False
        self.asks = 0  # sources asked (tests read it)
        self.background_asks = 0

    def get(self, plan: PartitionPlan) -> LogStart:
        """The log start of ``plan``'s partition (``plan``: the unbounded lineage plan).

        Raises :class:`rlm.errors.RemoteStorageIntegrityError` when a published object exists but
        cannot be read as one (a bound exists that this reader cannot know). Storage or a broker
        that does not answer is skipped (logged): the other sources and the highest bound this
        process saw still apply."""
        tp = plan.tp
        hit = self._fresh(plan, ahead=True)
        if hit is not None:
            return hit
        with self._ask_lock(tp):
            hit = self._fresh(plan, ahead=False)  # asked by another caller while this one waited
            if hit is not None:
                return hit
            return self._ask(plan)

    def close(self) -> None:
        """Stop background asks (one running finishes; none queued starts)."""
        with self._lock:
            self._closed = True
            pool, self._background = self._background, None
        if pool is not None:
            pool.close()

    def _fresh(self, plan: PartitionPlan, *, ahead: bool) -> LogStart | None:
        """The cached answer if younger than ``refresh_s`` (and made for the same remote start);
        with ``ahead``, one over half its life old is also asked again in the background."""
        now = self._clock()
        with self._lock:
            hit = self._cache.get(plan.tp)
            if hit is None or hit[1].remote != plan.log_start or now - hit[0] >= self.refresh_s:
                return None
            if ahead and now - hit[0] >= self.refresh_s * self.AHEAD:
                self._refresh_later(plan)
            return hit[1]

    def _refresh_later(self, plan: PartitionPlan) -> None:
        """Queue a background ask for ``plan``'s partition unless one is running (lock held)."""
        if self._closed or self._workers < 1:
            return
        if self._background is None:
            self._background = GetPool(self._workers, name="log-start-refresh")
        lock = self._asking.setdefault(plan.tp, threading.Lock())
        if lock.locked():
            return
        try:
            fut = self._background.submit(lambda: self._refresh(plan), Priority.DEMAND).future
        except RuntimeError:  # closed
            return
        self._queued.add(fut)
        fut.add_done_callback(self._queued.discard)

    def settle(self, timeout: float) -> bool:
        """Wait until the background asks queued so far are done (tests); False on timeout."""
        with self._lock:
            queued = list(self._queued)
        _, pending = wait(queued, timeout=timeout)
        return not pending

    def _refresh(self, plan: PartitionPlan) -> None:
        lock = self._ask_lock(plan.tp)
        if not lock.acquire(blocking=False):
            return  # a caller or another background ask is at it
        try:
            with self._lock:
                hit = self._cache.get(plan.tp)
                if hit is not None and self._clock() - hit[0] < self.refresh_s * self.AHEAD:
                    return  # refreshed since it was queued
                self.background_asks += 1
            self._ask(plan)
        except Exception as e:
            # an unreadable published object, or anything unforeseen: forget the answer, so the
            # next read asks while it waits and gets the error itself
            with self._lock:
                self._cache.pop(plan.tp, None)
            log.warning("log_start_refresh_failed", topic=plan.tp.topic, partition=plan.tp.partition,
                        error=str(e))
        finally:
            lock.release()

    def _ask_lock(self, tp: TopicIdPartition) -> threading.Lock:
        with self._lock:
            return self._asking.setdefault(tp, threading.Lock())

    def _ask(self, plan: PartitionPlan) -> LogStart:
        """Ask every source now and cache the answer (dated when the asking began)."""
        tp = plan.tp
        now = self._clock()
        with self._lock:
            self.asks += 1
        remote = [(s.metadata.start_offset, s.last) for s in plan.segments]
        try:
            published = self.rsm.read_log_start_offset(tp)
        except RemoteStorageIntegrityError:
            raise
        except RemoteStorageError as e:
            # storage down: the records themselves cannot be read either, so keep answering
            # (metadata, offsets) with the highest bound seen; the next refresh asks again
            log.warning("log_start_object_unreadable", topic=tp.topic, partition=tp.partition, error=str(e))
            published = None
        from_dir = self._from_log_dirs(tp, remote)
        from_broker = self._from_broker(tp, remote)
        bound = max((v for v in (published, from_dir, from_broker) if v is not None), default=-1)
        with self._lock:
            bound = max(bound, self._high.get(tp, -1))
            self._high[tp] = bound
            ans = LogStart(max(plan.log_start, bound), plan.log_start, published, from_dir, from_broker)
            self._cache[tp] = (now, ans)
        return ans

    def _from_log_dirs(self, tp: TopicIdPartition, remote: list[tuple[int, int]]) -> int | None:
        ktp = TopicPartition(tp.topic, tp.partition)
        for d in self.log_dirs:
            pdir = d / f"{tp.topic}-{tp.partition}"
            if not pdir.is_dir():
                continue
            try:
                if read_partition_metadata(pdir / "partition.metadata") != tp.topic_id:
                    continue  # a re-created topic of the same name: its log start is not this one's
                entry = checkpoint_log_start(d, ktp)
                first = first_segment_offset(pdir)  # after the checkpoint: see deletion_bound
            except LogFormatError as e:
                log.warning("log_start_checkpoint_unreadable", dir=str(d), topic=tp.topic,
                            partition=tp.partition, error=str(e))
                continue
            found = deletion_bound(entry, remote, first)
            if found is not None:
                return found
        return None

    def _from_broker(self, tp: TopicIdPartition, remote: list[tuple[int, int]]) -> int | None:
        if self.broker is None or time.monotonic() < self._broker_down_until:
            return None
        try:
            earliest = self.broker.local_log_start(tp.topic, tp.partition, timeout_s=self.broker_timeout_s)
        except MetadataUnavailableError as e:
            # remote reads must keep working without the broker: the other sources still bound
            # them, and no partition waits for it again for a while (a Metadata request plans
            # every partition)
            self._broker_down_until = time.monotonic() + max(self.refresh_s, _BROKER_RETRY_S)
            log.warning("log_start_broker_unavailable", topic=tp.topic, partition=tp.partition, error=str(e))
            return None
        first = None
        for d in self.log_dirs:  # listed after the broker answered: see deletion_bound
            first = first_segment_offset(d / f"{tp.topic}-{tp.partition}")
            if first is not None:
                break
        return deletion_bound(earliest, remote, first)
