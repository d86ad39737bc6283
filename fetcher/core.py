"""``RemoteFetcher``: the one read core every face (CLI, HTTP, Kafka endpoint, Spark) calls.

It owns the storage plugin, the metadata manager (following every partition, read-only for the
embedded file store), the remote index cache, the segment reader and the reader pool, and
answers three questions: which segments (``plan``), where to start and stop (``fetch``,
``offset_for_timestamp``, ``plan_scan``), and how bytes become records (``scan``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from fetcher.broker import BrokerOffsets
from fetcher.fetch import FetchRequest, FetchResult, IsolationLevel, fetch_from_plan
from fetcher.frontier import FrontierSource, LogDirFrontier
from fetcher.index_cache import DIR_NAME, RemoteIndexCache
from fetcher.log_start import LogStart, LogStartSources, bounded_plan
from fetcher.planning import PartitionPlan, plan_partition
from fetcher.pool import ReaderPool
from fetcher.reader import ByteRateLimiter, ReadStats, SegmentReader
from fetcher.timestamps import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TimestampAnswer, offset_for_timestamp
from fetcher.topic_ids import TopicIds
from fetcher.transactions import CommittedBound, StableOffsets, collect_aborted_txns
from rlm.config import DaemonConfig, ReadConfig
from rlm.errors import RemoteSegmentDeletedError, UnknownTopicOrPartitionError
from rlm.log.txn_index import AbortedTxn
from rlm.types import RemoteLogSegmentState, TopicIdPartition
from rlmm.api import RemoteLogMetadataManager
from rsm_plugins.api import RemoteStorageManager

if TYPE_CHECKING:  # the scan path (Arrow, numba kernels) loads on the first scan: a one-record
    import pyarrow as pa  # fetch or an offset lookup never pays for it

    from fetcher.scan import ScanRange

T = TypeVar("T")

log = structlog.get_logger(__name__)

_PLAN_TTL_S = 1.0


class OffsetAnswer:
    """An offset lookup's answer and where it came from (``remote`` or ``broker``)."""

    __slots__ = ("leader_epoch", "offset", "source", "timestamp")

    def __init__(self, offset: int, timestamp: int, leader_epoch: int, source: str) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.leader_epoch = leader_epoch
        self.source = source

    def to_dict(self) -> dict[str, Any]:
        return {"offset": self.offset, "timestamp": self.timestamp, "leader_epoch": self.leader_epoch,
                "source": self.source}

    def __repr__(self) -> str:
        return f"OffsetAnswer({self.to_dict()})"


class RemoteFetcher:
    """Historical reads of tiered partitions. Thread-safe; close it (or use ``with``).

    This class is the read core's public surface: every face (CLI, HTTP, the Kafka endpoint,
    Spark, ``rlm demo``/``backfill``) calls its methods and reads only ``read_config``,
    ``work_dir`` and ``broker`` (the broker's offsets, :class:`fetcher.broker.BrokerOffsets`, or
    ``None``). ``rsm``, ``rlmm``, ``reader``, ``indexes``, ``pool``, ``stable`` and
    ``log_starts`` are the core's own parts: faces never choose segments, walk indexes or run
    work on the reader pool through them (:meth:`run_bounded`, :meth:`counters` and
    :attr:`read_capacity` are what they need).
    """

    def __init__(self, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, *, work_dir: Path,
                 read: ReadConfig | None = None, index_cache_bytes: int = 1 << 30,
                 broker: BrokerOffsets | None = None, owns_plugins: bool = False,
                 log_dirs: Sequence[Path] = (), load_all: bool = True) -> None:
        """``load_all=False`` (a command reading a few partitions): the metadata of a partition is
        loaded when it is first read, only the metadata partitions it maps to; every one is loaded
        (all at once) only when a listing of every topic needs it or the topic's id is unknown."""
        self.read_config = read or ReadConfig.model_validate({})
        rc = self.read_config
        self.rsm = rsm
        self.rlmm = rlmm
        self.broker = broker
        self.work_dir = work_dir
        self._owns = owns_plugins
        self.stats = ReadStats()
        self.indexes = RemoteIndexCache(work_dir / DIR_NAME, index_cache_bytes, rsm.fetch_index,
                                        on_fetch=lambda _t, n: self.stats.add_index(n))
        self.reader = SegmentReader(rsm, chunk_bytes=rc.chunk_bytes, cache_bytes=rc.chunk_cache_bytes,
                                    read_ahead_chunks=rc.read_ahead_chunks, parallel_gets=rc.parallel_gets,
                                    read_ahead_bytes=rc.read_ahead_bytes,
                                    limiter=ByteRateLimiter(rc.fetch_max_bytes_per_second), stats=self.stats)
        frontier = None
        if log_dirs:
            lso = (None if broker is None
                   else lambda tp: broker.last_stable_offset(tp.topic, tp.partition))
            frontier = LogDirFrontier(log_dirs, lso)
        self.stable = StableOffsets(rsm, frontier)
        self.log_starts = LogStartSources(rsm, broker=broker, log_dirs=list(log_dirs),
                                          refresh_s=rc.log_start_refresh_ms / 1000)
        self.pool = ReaderPool(rc.reader_threads, rc.reader_max_pending_tasks, rc.fetch_max_wait_ms)
        self._plans: dict[TopicIdPartition, tuple[float, PartitionPlan]] = {}
        #: the segments of each partition's last chain, to drop cache entries of those that leave it
        self._chained: dict[TopicIdPartition, dict[Any, Any]] = {}
        self._catalog_cache: tuple[float, dict[str, list[TopicIdPartition]],
                                   dict[tuple[str, int], TopicIdPartition]] | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._topic_ids = TopicIds(log_dirs, broker)
        self._followed: dict[tuple[str, int], TopicIdPartition] = {}  # loaded alone (load_all=False)
        self._all_loaded = load_all
        if load_all:
            rlmm.follow_all()

    @classmethod
    def from_config(cls, config: DaemonConfig, *, load_all: bool = True) -> RemoteFetcher:
        """Build storage and metadata from the same configuration ``rlm run`` uses (read-only);
        ``load_all`` as in the constructor."""
        from rlm.plugin_setup import load_rlmm, load_rsm

        node_id = config.node_id if config.node_id is not None else -1
        rsm = load_rsm(config, node_id)
        try:
            rlmm = load_rlmm(config, node_id, read_only=True)
        except BaseException:
            rsm.close()
            raise
        broker = (BrokerOffsets(config.bootstrap_servers, config.kafka_client)
                  if config.bootstrap_servers else None)
        try:
            return cls(rsm, rlmm, work_dir=config.work_dir, read=config.read,
                       index_cache_bytes=config.index_file_cache_total_size_bytes, broker=broker,
                       owns_plugins=True, log_dirs=config.log_dirs, load_all=load_all)
        except BaseException:
            rlmm.close()
            rsm.close()
            raise

    @property
    def read_capacity(self) -> int:
        """How many reads the reader pool takes at once (threads plus queue slots): a face limits
        its own worker threads a little above it, so a burst is refused by the pool, not queued."""
        return self.pool.threads + self.pool.max_pending

    def run_bounded(self, fn: Callable[[], T], timeout_ms: int | None = None, what: str = "read") -> T:
        """Run ``fn`` (a blocking read, e.g. pulling a :meth:`scan` iterator) on the reader pool:
        bounded like every other remote read (``ReaderPoolFullError`` when full, a timeout error
        after ``timeout_ms``, by default ``remote.fetch.max.wait.ms``)."""
        return self.pool.run(fn, timeout_ms, what)

    def add_frontier_source(self, source: FrontierSource) -> None:
        """Let ``source`` decide transactions open at the remote end when the broker's log dir
        cannot (not configured here, or a copy gap): the Kafka endpoint in merged mode adds one
        that asks the broker, so read_committed reads go on to the partition's LSO."""
        self.stable.add_source(source)

    def remove_frontier_source(self, source: FrontierSource) -> None:
        self.stable.remove_source(source)

    def counters(self) -> dict[str, int]:
        """The core's counters for metrics: remote traffic, chunk and index caches, reader pool."""
        out = self.stats.snapshot()
        out.update(index_cache_hits=self.indexes.hits, index_cache_misses=self.indexes.misses,
                   index_cache_bytes=self.indexes.total_bytes, pool_rejected=self.pool.rejected,
                   pool_timeouts=self.pool.timeouts, pool_in_use=self.pool.in_use,
                   pool_capacity=self.read_capacity)
        return out

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.pool.close()
        self.log_starts.close()
        self.reader.close()
        if self.broker is not None:
            self.broker.close()
        if self._owns:
            self.rlmm.close()
            self.rsm.close()

    def __enter__(self) -> RemoteFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- catalog ---------------------------------------------------------------------------
    def _load_all(self) -> None:
        """Every metadata partition, all at once (a listing of every topic needs them)."""
        with self._lock:
            if self._all_loaded:
                return
        self.rlmm.follow_all()
        with self._lock:
            self._all_loaded = True

    def _load_alone(self, topic: str, partitions: Sequence[int] | None) -> list[TopicIdPartition] | None:
        """Loads only the metadata of ``topic``'s ``partitions`` (``None``: every partition the
        broker lists) and returns those with remote data; ``None`` when that cannot decide (the
        id or the partitions unknown, or nothing remote under the current id: a deleted or
        re-created topic is found in the full listing instead)."""
        with self._lock:
            if self._all_loaded:
                return None
            if partitions is not None and all((topic, p) in self._followed for p in partitions):
                return [self._followed[(topic, p)] for p in partitions]
        info = self._topic_ids.lookup(topic, with_partitions=partitions is None)
        wanted = partitions if partitions is not None else (info.partitions if info is not None else None)
        if info is None or not wanted:
            return None
        tps = [TopicIdPartition(info.topic_id, topic, p) for p in wanted]
        self.rlmm.follow(set(tps))
        known = self.rlmm.known_partitions()
        found = [tp for tp in tps if tp in known]
        if not found or (partitions is not None and len(found) < len(tps)):
            return None
        with self._lock:
            self._followed.update({(tp.topic, tp.partition): tp for tp in found})
        return found

    def topic_partitions(self, topic: str) -> list[TopicIdPartition]:
        """``topic``'s partitions with remote data, sorted (``[]``: none). Loads only their
        metadata when the broker lists the topic, else every metadata partition."""
        found = self._load_alone(topic, None)
        if found is not None:
            return sorted(found, key=lambda tp: tp.partition)
        return self.topics().get(topic, [])

    def topics(self) -> dict[str, list[TopicIdPartition]]:
        """Every topic with remote data, its partitions sorted (one topic id per name: the one
        with the most segments, if a name was deleted and re-created). Always listed afresh;
        reads look partitions up in a copy kept for about a second (:meth:`partition`)."""
        self._load_all()
        return {name: list(tps) for name, tps in self._catalog(max_age_s=0.0)[0].items()}

    def _catalog(self, max_age_s: float) -> tuple[dict[str, list[TopicIdPartition]],
                                                  dict[tuple[str, int], TopicIdPartition]]:
        """(topics, (topic, partition) -> id), listed again when older than ``max_age_s``."""
        now = time.monotonic()
        with self._lock:
            cached = self._catalog_cache
        if cached is not None and now - cached[0] < max_age_s:
            return cached[1], cached[2]
        topics = self._list_topics()
        index = {(tp.topic, tp.partition): tp for tps in topics.values() for tp in tps}
        with self._lock:
            self._catalog_cache = (now, topics, index)
        return topics, index

    def _list_topics(self) -> dict[str, list[TopicIdPartition]]:
        by_name: dict[str, dict[Any, list[TopicIdPartition]]] = {}
        for tp in self.rlmm.known_partitions():
            by_name.setdefault(tp.topic, {}).setdefault(tp.topic_id, []).append(tp)
        out: dict[str, list[TopicIdPartition]] = {}
        for name, ids in sorted(by_name.items()):
            # Counting segments costs a metadata object per segment: count only when a name
            # really has two topic ids (it was deleted and re-created).
            if len(ids) == 1:
                best = next(iter(ids.values()))
            else:
                best = max(ids.values(), key=lambda tps: sum(self._segment_count(tp) for tp in tps))
            out[name] = sorted(best, key=lambda tp: tp.partition)
        return out

    def _segment_count(self, tp: TopicIdPartition) -> int:
        return sum(1 for md in self.rlmm.list_remote_log_segments(tp)
                   if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED)

    def partition(self, topic: str, partition: int) -> TopicIdPartition:
        """The partition's id; :class:`UnknownTopicOrPartitionError` when nothing is remote.
        Every read asks this: it is a lookup in the catalog kept for about a second (a name not
        found there is looked up again in a fresh listing: it may be new). With ``load_all=False``
        the first read of a partition loads only its metadata partition."""
        if not self._all_loaded:
            alone = self._load_alone(topic, [partition])
            if alone is not None:
                return alone[0]
            self._load_all()
        for max_age_s in (_PLAN_TTL_S, 0.0):
            found = self._catalog(max_age_s)[1].get((topic, partition))
            if found is not None:
                return found
        tps = self._catalog(_PLAN_TTL_S)[0].get(topic)
        if tps is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no remote data")
        for tp in tps:
            if tp.partition == partition:
                return tp
        raise UnknownTopicOrPartitionError(
            f"{topic}-{partition} has no remote data (partitions with data: {[t.partition for t in tps]})")

    def plan(self, topic: str | TopicIdPartition, partition: int | None = None) -> PartitionPlan:
        """The partition's lineage chain from its log start on (cached for about a second;
        metadata changes show after). Offsets below the log start (:meth:`log_start`) are not in
        it, so every face reading through it answers out of range for them."""
        tp = topic if isinstance(topic, TopicIdPartition) else self.partition(topic, int(partition or 0))
        now = time.monotonic()
        with self._lock:
            cached = self._plans.get(tp)
            if cached is not None and now - cached[0] < _PLAN_TTL_S:
                return cached[1]
        raw = plan_partition(tp, self.rlmm.list_remote_log_segments(tp))
        plan = bounded_plan(raw, self.log_starts.get(raw).offset)
        current = {link.metadata.remote_log_segment_id: link.metadata for link in raw.segments}
        with self._lock:
            self._plans[tp] = (now, plan)
            before = self._chained.get(tp, {})
            self._chained[tp] = current
        for sid, md in before.items():  # left the chain (deleted): its cached indexes and chunks go
            if sid not in current:
                self.indexes.invalidate(md)
                self.reader.forget(md)
        return plan

    def latest_epoch(self, topic: str | TopicIdPartition, partition: int | None = None) -> int:
        """The partition's latest leader epoch on the remote lineage (-1: nothing remote). Unlike
        :meth:`plan` it does not need the log start (the lineage is not cut by it), so it never
        waits for the log start's sources: a Metadata request asks this for every partition."""
        tp = topic if isinstance(topic, TopicIdPartition) else self.partition(topic, int(partition or 0))
        with self._lock:
            cached = self._plans.get(tp)
        if cached is not None:
            return cached[1].latest_epoch
        return plan_partition(tp, self.rlmm.list_remote_log_segments(tp)).latest_epoch

    def log_start(self, topic: str | TopicIdPartition, partition: int | None = None) -> LogStart:
        """The partition's log start offset — ``max(remote log start, DeleteRecords bound)`` — and
        what each source said (see :mod:`fetcher.log_start`). No face returns a record below it."""
        tp = topic if isinstance(topic, TopicIdPartition) else self.partition(topic, int(partition or 0))
        return self.log_starts.get(plan_partition(tp, self.rlmm.list_remote_log_segments(tp)))

    def _invalidate(self, tp: TopicIdPartition) -> None:
        with self._lock:
            self._plans.pop(tp, None)

    # ---- reads -----------------------------------------------------------------------------
    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20,
              isolation: str | IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
              leader_epoch: int | None = None, min_one_message: bool = True, raw_tail: bool = False,
              drop_aborted: bool = False, sequential: bool = False,
              timeout_ms: int | None = None, as_views: bool = False) -> FetchResult:
        """Kafka's remote read (see :mod:`fetcher.fetch`), run on the reader pool; ``as_views``:
        the records as :class:`~fetcher.fetch.RecordViews` (``result.views``), not joined."""
        level = IsolationLevel.parse(isolation)
        tp = self.partition(topic, partition)

        def task() -> FetchResult:
            plan = self.plan(tp)
            if level is IsolationLevel.READ_COMMITTED:
                bound = self.stable.committed_bound(plan)
                req = FetchRequest(offset, max_bytes, level, leader_epoch, min_one_message, raw_tail,
                                   drop_aborted, sequential, bound.stable_offset, bound.frontier_aborted,
                                   bound.limited, as_views=as_views)
            else:
                req = FetchRequest(offset, max_bytes, level, leader_epoch, min_one_message, raw_tail,
                                   drop_aborted, sequential, as_views=as_views)
            try:
                return fetch_from_plan(plan, req, self.reader, self.indexes)
            except RemoteSegmentDeletedError:
                self._invalidate(tp)  # retention removed it meanwhile: the next plan skips it
                raise

        return self.pool.run(task, timeout_ms, what=f"fetch {topic}-{partition}@{offset}")

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int, *,
                             timeout_ms: int | None = None) -> OffsetAnswer | None:
        """ListOffsets over remote + local: remote first; past the remote end (or for ``latest``)
        the broker answers when ``bootstrap_servers`` is configured."""
        tp = self.partition(topic, partition)
        plan = self.plan(tp)
        if timestamp == LATEST_TIMESTAMP and self.broker is not None:
            return self._broker_answer(topic, partition, timestamp)
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetAnswer(plan.log_start, -1, plan.epoch_for_offset(plan.log_start), "remote")

        def task() -> TimestampAnswer | None:
            return offset_for_timestamp(plan, timestamp, self.reader, self.indexes)

        wait = self.read_config.offsets_timeout_ms if timeout_ms is None else timeout_ms
        found = self.pool.run(task, wait, what=f"offset lookup {topic}-{partition}@ts {timestamp}")
        if found is not None:
            return OffsetAnswer(found.offset, found.timestamp, found.leader_epoch, "remote")
        if self.broker is not None:
            return self._broker_answer(topic, partition, timestamp)
        return None

    def list_offset(self, topic: str, partition: int, timestamp: int, *,
                    isolation: IsolationLevel | str = IsolationLevel.READ_UNCOMMITTED,
                    remote_only: bool = False) -> OffsetAnswer | None:
        """Kafka's ListOffsets for one partition, answered in one place for every face.

        ``EARLIEST_TIMESTAMP`` is the partition's log start. ``LATEST_TIMESTAMP`` is the end of
        what the reader serves: with ``remote_only`` (or no broker) the remote end — for
        read_committed the read_committed bound (:meth:`committed_bound`) — otherwise the
        broker's answer. Other negative specs (e.g. max-timestamp) have no remote answer
        (``None``); a timestamp is :meth:`offset_for_timestamp`'s answer.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            return self.offset_for_timestamp(topic, partition, timestamp)
        if timestamp == LATEST_TIMESTAMP:
            if remote_only or self.broker is None:
                plan = self.plan(topic, partition)
                end = (self.last_stable_offset(topic, partition)
                       if IsolationLevel.parse(isolation) is IsolationLevel.READ_COMMITTED else plan.log_end)
                return OffsetAnswer(end, -1, max(plan.latest_epoch, -1), "remote")
            return self._broker_answer(topic, partition, timestamp)
        if timestamp < 0:
            return None
        return self.offset_for_timestamp(topic, partition, timestamp)

    def _broker_answer(self, topic: str, partition: int, timestamp: int) -> OffsetAnswer | None:
        assert self.broker is not None
        got = self.broker.offset_for_timestamp(topic, partition, timestamp)
        if got is None:
            return None
        return OffsetAnswer(got[0], got[1], got[2], "broker")

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """read_committed readers see remote records below it: the partition's LSO capped at the
        remote end, or the remote LSO when a transaction open there cannot be decided (see
        :meth:`committed_bound` and :mod:`fetcher.transactions`)."""
        return self.committed_bound(topic, partition).stable_offset

    def committed_bound(self, topic: str, partition: int) -> CommittedBound:
        """The read_committed bound of the partition's remote tier, the aborted transactions past
        it, and whether it is limited to the remote LSO (say so to the user when it is)."""
        return self.stable.committed_bound(self.plan(topic, partition))

    def locate_timestamp(self, tp: TopicIdPartition, timestamp: int) -> int | None:
        """KIP-33 over the remote log on the caller's thread (bulk planning, e.g. Spark's driver,
        not a consumer's request: no reader-pool slot, no short wait budget); ``None`` when no
        remote record is that late."""
        found = offset_for_timestamp(self.plan(tp), timestamp, self.reader, self.indexes)
        return None if found is None else found.offset

    def split_range(self, rng: ScanRange, split_bytes: int) -> list[ScanRange]:
        """``rng`` cut on its segment's offset-index entries into pieces of about ``split_bytes``."""
        from fetcher.scan import split_scan_range

        return split_scan_range(rng, self.indexes.get(rng.link.metadata).offset, split_bytes)

    def aborted_transactions(self, plan: PartitionPlan, rng: ScanRange,
                             bound: CommittedBound) -> tuple[AbortedTxn, ...]:
        """The aborted transactions overlapping ``rng``, collected over the whole plan and past
        its end from ``bound`` (:meth:`committed_bound`), for a reader that carries only its own
        range (a Spark task)."""
        return tuple(collect_aborted_txns(plan, rng.link, rng.start, rng.end, self.indexes,
                                          bound.frontier_aborted))

    def plan_scan(self, topic: str, partition: int, *, start_offset: int | None = None,
                  end_offset: int | None = None, start_timestamp: int | None = None,
                  end_timestamp: int | None = None) -> tuple[PartitionPlan, list[ScanRange]]:
        """Links covering the requested range; timestamps are mapped with KIP-33 semantics
        (start: first offset with timestamp >= it; end: exclusive, first offset >= it)."""
        from fetcher.scan import plan_scan

        plan = self.plan(topic, partition)
        start = plan.log_start if start_offset is None else start_offset
        end = plan.log_end if end_offset is None else end_offset
        if start_timestamp is not None:
            a = offset_for_timestamp(plan, start_timestamp, self.reader, self.indexes)
            start = max(start, a.offset if a is not None else plan.log_end)
        if end_timestamp is not None:
            a = offset_for_timestamp(plan, end_timestamp, self.reader, self.indexes)
            end = min(end, a.offset if a is not None else plan.log_end)
        return plan, plan_scan(plan, start, end)

    def scan(self, topic: str, partition: int, *, start_offset: int | None = None,
             end_offset: int | None = None, start_timestamp: int | None = None,
             end_timestamp: int | None = None,
             isolation: str | IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
             include_headers: bool = True, max_batch_rows: int = 65536) -> Iterator[pa.RecordBatch]:
        """Arrow record batches (:data:`rlm.log.KAFKA_SCHEMA`) of the range, in offset order.

        Runs on the caller's thread (bulk readers bring their own parallelism: Spark tasks);
        storage GETs still go through the reader's bounded parallel fetches and read-ahead.
        """
        from fetcher.scan import scan_ranges

        level = IsolationLevel.parse(isolation)
        frontier_aborted: tuple[AbortedTxn, ...] = ()
        if level is IsolationLevel.READ_COMMITTED:
            bound = self.committed_bound(topic, partition)
            if bound.limited:
                log.warning("read_committed_limited", topic=topic, partition=partition,
                            stable_offset=bound.stable_offset,
                            why="a transaction open at the remote end is decided by records not tiered "
                                "yet and no broker log dir is configured")
            frontier_aborted = bound.frontier_aborted
            end_offset = bound.stable_offset if end_offset is None else min(end_offset, bound.stable_offset)
        plan, ranges = self.plan_scan(topic, partition, start_offset=start_offset, end_offset=end_offset,
                                      start_timestamp=start_timestamp, end_timestamp=end_timestamp)
        yield from scan_ranges(plan, ranges, self.reader, self.indexes, isolation=level,
                               max_batch_rows=max_batch_rows,
                               include_headers=include_headers, frontier_aborted=frontier_aborted)
