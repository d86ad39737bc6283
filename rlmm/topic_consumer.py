"""The background consumer of the metadata topic: the only writer of the in-memory cache.

It mirrors Kafka's ``ConsumerTask``: one thread, ``assign()`` (no group, no commits) of just
the metadata partitions that hold the user partitions this instance manages, polling ~100 ms.
Differences, on purpose:

* Every event of an assigned metadata partition is applied (Kafka filters by user partition
  and keeps per-user-partition offsets). The manager hides partitions it does not manage, and
  one offset per metadata partition is what makes per-partition snapshots simple.
* A record that cannot be decoded (or an apiKey-3 snapshot record, which Kafka's consumer
  cannot handle) is logged with partition/offset and skipped; Kafka's thread stops for good.
* State survives restarts: a metadata partition starts from its snapshot and the offset in
  ``_rlmm_committed_offsets`` and consumes only newer records; a missing, corrupt or
  inconsistent snapshot (e.g. newer than the topic: the topic was recreated) means a replay
  from the beginning, never a wrong state.

Writers wait on :meth:`MetadataConsumer.await_applied` (read-your-writes); readers wait on
:meth:`MetadataConsumer.await_ready` (caught up to the end offset seen after assignment).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import structlog
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from rlm.errors import ConfigError, MetadataDecodeError
from rlmm.cache import RemoteLogMetadataCache
from rlmm.partitioner import RemoteLogMetadataTopicPartitioner
from rlmm.serde import RemoteLogMetadata, RemoteLogSegmentMetadataSnapshot, deserialize
from rlmm.topic_config import TopicRlmmConfig
from rlmm.topic_snapshots import TopicSnapshotStore

log = structlog.get_logger(__name__)
_KAFKA_LOG = logging.getLogger("rlmm.kafka.consumer")  # librdkafka's own log lines, not stderr

_POLL_S = 0.1
_BATCH = 1000
_WATERMARK_RETRY_S = 0.25  # a partition whose end offset the cluster did not give (no leader yet)
_LIST_OFFSETS_TIMEOUT_S = 5.0
_LATEST, _EARLIEST = -1, -2  # ListOffsets' special timestamps: end offset, log start
_REJECTED_KEEP = 1024
_ERROR_BACKOFF_S = 1.0


@dataclass
class ConsumerStats:
    """Counters the tests and ``rlm status`` read; monotonically increasing."""

    records_consumed: int = 0
    records_applied: int = 0
    records_rejected: int = 0
    records_skipped: int = 0
    decode_errors: int = 0
    snapshots_loaded: dict[int, int] = field(default_factory=dict)  # metadata partition -> offset
    snapshots_written: int = 0
    replays_from_beginning: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class LoadProgress:
    """One metadata partition's loading: the next offset to apply (``reached``) against the end
    offset captured when it was assigned (``end``; ``None``: the cluster has not said yet)."""

    assigned: bool
    reached: int
    end: int | None
    ready: bool

    def describe(self, mp: int) -> str:
        if not self.assigned:
            return f"{mp}: not assigned yet"
        if self.end is None:
            return f"{mp}: end offset unknown (ListOffsets not answered), at offset {self.reached}"
        state = "done" if self.ready else f"{max(self.reached, 0)}/{self.end}"
        return f"{mp}: {state}"


@dataclass
class _PartitionState:
    applied: int = -1  # offset of the last record applied (-1: none)
    snapshot_offset: int = -1  # ``applied`` when the last snapshot was written or loaded
    end_target: int | None = None  # end offset to reach before reads are served
    ready: bool = False
    next_watermark_try: float = 0.0
    reassign: bool = True  # position the consumer at applied + 1 on the next assign()
    rejected: OrderedDict[int, None] = field(default_factory=OrderedDict)
    log_start: int | None = None  # the partition's first offset, when asked with its end offset

    def start_position(self) -> int:
        """Where the consumer starts: after the last applied record, else at the log start when
        known (an explicit offset is fetched at once; OFFSET_BEGINNING first costs the client a
        ListOffsets of its own per partition, which can wait behind a Fetch held by the broker)."""
        if self.applied >= 0:
            return self.applied + 1
        return self.log_start if self.log_start is not None else OFFSET_BEGINNING


class MetadataConsumer:
    """Owns the Kafka consumer and its thread; everything else reads through the shared lock."""

    def __init__(self, cfg: TopicRlmmConfig, cache: RemoteLogMetadataCache, lock: threading.RLock,
                 snapshots: TopicSnapshotStore | None) -> None:
        self._cfg = cfg
        self._cache = cache
        self._cond = threading.Condition(lock)
        self._snapshots = snapshots
        self._partitioner = RemoteLogMetadataTopicPartitioner(cfg.num_partitions)
        try:
            self._consumer = Consumer({**cfg.consumer_config(), "logger": _KAFKA_LOG})
        except KafkaException as e:
            raise ConfigError(f"invalid metadata consumer configuration: {e}") from e
        self._wanted: set[int] = set()
        self._states: dict[int, _PartitionState] = {}
        self._changed = False
        self._closing = False
        self._failure: BaseException | None = None
        self._last_snapshot = time.monotonic()
        self.stats = ConsumerStats()
        self._thread = threading.Thread(target=self._run, name="rlmm-consumer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def use_snapshots(self, snapshots: TopicSnapshotStore | None) -> None:
        """Where partitions start from and their snapshots go (before :meth:`start`)."""
        self._snapshots = snapshots

    def topic_partitions(self) -> int | None:
        """The metadata topic's partition count, asked on this consumer's own connection (before
        :meth:`start`); ``None`` when the topic is absent or the cluster does not answer in time
        (at most the initialization timeout: the caller then retries for that long)."""
        name = self._cfg.topic_name
        timeout = min(_LIST_OFFSETS_TIMEOUT_S, self._cfg.init_retry_max_timeout_ms / 1000)
        try:
            md = self._consumer.list_topics(name, timeout=timeout).topics.get(name)
        except KafkaException as e:
            log.debug("rlmm_topic_unlisted", topic=name, error=str(e))
            return None
        if md is None or md.error is not None:
            return None
        return len(md.partitions)

    # ---- API for the manager (any thread) ----------------------------------------------------
    def set_wanted(self, partitions: set[int]) -> None:
        with self._cond:
            if partitions != self._wanted:
                self._wanted = set(partitions)
                self._changed = True
                self._cond.notify_all()

    def is_ready(self, mp: int) -> bool:
        with self._cond:
            st = self._states.get(mp)
            return st is not None and st.ready

    def await_ready(self, partitions: set[int], deadline: float) -> bool:
        """Wait until every metadata partition in ``partitions`` has caught up once."""
        with self._cond:
            while True:
                if all((st := self._states.get(mp)) is not None and st.ready for mp in partitions):
                    return True
                if not self._wait(deadline):
                    return False

    def require_catch_up(self, mp: int) -> None:
        """Make metadata partition ``mp`` not ready until the consumer thread has re-read its end
        offset and applied everything up to it (records other writers appended meanwhile)."""
        with self._cond:
            st = self._states.get(mp)
            if st is not None and st.ready:
                st.ready = False
                st.end_target = None
                st.next_watermark_try = 0.0
                self._cond.notify_all()

    def await_applied(self, mp: int, offset: int, deadline: float) -> bool:
        """Wait until the record at ``offset`` of metadata partition ``mp`` has been applied."""
        with self._cond:
            while True:
                st = self._states.get(mp)
                if st is not None and st.applied >= offset:
                    return True
                if not self._wait(deadline):
                    return False

    def was_rejected(self, mp: int, offset: int) -> bool:
        """True if the cache dropped the event at ``offset`` as an invalid transition."""
        with self._cond:
            st = self._states.get(mp)
            return st is not None and offset in st.rejected

    def applied_offsets(self) -> dict[int, int]:
        with self._cond:
            return {mp: st.applied for mp, st in self._states.items()}

    def progress(self, partitions: set[int]) -> dict[int, LoadProgress]:
        """How far each of ``partitions`` got (for a timeout message that says so)."""
        with self._cond:
            out: dict[int, LoadProgress] = {}
            for mp in sorted(partitions):
                st = self._states.get(mp)
                if st is None:
                    out[mp] = LoadProgress(assigned=False, reached=-1, end=None, ready=False)
                else:
                    out[mp] = LoadProgress(assigned=True, reached=st.applied + 1, end=st.end_target,
                                           ready=st.ready)
            return out

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.ident is None:  # never started: the thread that closes the client never ran
            self._consumer.close()
        elif self._thread.is_alive():
            self._thread.join(timeout)

    def _wait(self, deadline: float) -> bool:
        if self._closing or self._failure is not None:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self._cond.wait(min(remaining, 0.5))
        return True

    # ---- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._closing:
                        break
                    if not self._wanted and not self._states:
                        self._cond.wait(0.5)
                        continue
                try:
                    self._step()
                except KafkaException as e:  # client trouble (broker gone, ...): retry, never stop
                    log.warning("rlmm_consumer_retry", error=str(e))
                    with self._cond:
                        for st in self._states.values():
                            st.reassign = True
                        self._cond.wait(_ERROR_BACKOFF_S)
        except BaseException as e:
            log.exception("rlmm_consumer_failed")
            with self._cond:
                self._failure = e
                self._cond.notify_all()
        finally:
            try:
                if self._snapshots is not None and self._failure is None:
                    self._write_snapshots(set(self._states))
            finally:
                self._consumer.close()

    def _step(self) -> None:
        self._reconcile()
        self._check_ready()
        # poll() returns on the first record (consume() would wait for a full batch), then
        # drain what is already buffered without waiting.
        first = self._consumer.poll(_POLL_S)
        if first is not None:
            self._handle([first, *self._consumer.consume(_BATCH, timeout=0)])
        if self._snapshots is not None and \
                time.monotonic() - self._last_snapshot >= self._cfg.snapshot_interval_ms / 1000:
            self._write_snapshots(set(self._states))

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def _reconcile(self) -> None:
        with self._cond:
            if not self._changed and not any(st.reassign for st in self._states.values()):
                return
            wanted = set(self._wanted)
            self._changed = False
        removed = set(self._states) - wanted
        if removed and self._snapshots is not None:
            self._write_snapshots(removed)
        with self._cond:
            for mp in removed:
                self._drop(mp)
                del self._states[mp]
            for mp in sorted(wanted - set(self._states)):
                self._states[mp] = self._load(mp)
        # The end offsets of the partitions about to be (re)assigned are asked now, in one
        # batched ListOffsets, before assign() starts their fetches: asked afterwards, each would
        # queue on the broker connection behind a Fetch that the broker holds for
        # fetch.wait.max.ms once the partitions are at their end (~0.5 s per partition, one
        # after the other: 50 partitions took 25 s).
        self._check_ready(force=True)
        with self._cond:
            assignment = [TopicPartition(self._cfg.topic_name, mp, st.start_position())
                          for mp, st in sorted(self._states.items())]
            for st in self._states.values():
                st.reassign = False
            self._cond.notify_all()
        self._consumer.assign(assignment)
        log.info("rlmm_consumer_assigned", partitions=[tp.partition for tp in assignment])

    def _load(self, mp: int) -> _PartitionState:
        """State of a newly assigned metadata partition: from its snapshot if one is usable."""
        st = _PartitionState()
        if self._snapshots is None:
            return st
        loaded = self._snapshots.load(mp, self._cache)
        if loaded is None:
            self.stats.replays_from_beginning.add(mp)
            return st
        st.applied = st.snapshot_offset = loaded
        self.stats.snapshots_loaded[mp] = loaded
        return st

    def _drop(self, mp: int) -> None:
        for tp in list(self._cache.partitions()):
            if self._partitioner.metadata_partition(tp) == mp:
                self._cache.drop_partition(tp)

    def _list_offsets(self, mps: list[int], spec: int) -> dict[int, int]:
        """One batched ListOffsets (``spec`` -1: end offset, -2: log start) for ``mps``; the
        partitions the cluster did not answer for are missing from the result."""
        if not mps:
            return {}
        got = self._consumer.offsets_for_times(
            [TopicPartition(self._cfg.topic_name, mp, spec) for mp in mps], timeout=_LIST_OFFSETS_TIMEOUT_S)
        out: dict[int, int] = {}
        for tp in got:
            if tp.error is None and tp.offset >= 0:
                out[tp.partition] = tp.offset
            else:
                log.warning("rlmm_list_offsets_failed", partition=tp.partition, error=str(tp.error))
        return out

    def _check_ready(self, *, force: bool = False) -> None:
        """Capture the end offset of every partition that has none yet (all in one request);
        ``force`` ignores the retry back-off (a fresh assignment)."""
        now = time.monotonic()
        with self._cond:
            pending = {mp: st.applied for mp, st in self._states.items()
                       if st.end_target is None and (force or st.next_watermark_try <= now)}
        if not pending:
            return
        try:
            ends = self._list_offsets(sorted(pending), _LATEST)
            starts = self._list_offsets(sorted(mp for mp in pending if mp in ends), _EARLIEST)
        except KafkaException as e:
            log.warning("rlmm_watermarks_unavailable", partitions=sorted(pending), error=str(e))
            ends, starts = {}, {}
        with self._cond:
            for mp in pending:
                st = self._states.get(mp)
                if st is None:
                    continue
                high = ends.get(mp)
                if high is None:
                    st.next_watermark_try = now + _WATERMARK_RETRY_S
                    continue
                if st.applied + 1 > high:
                    # Our snapshot is ahead of the topic: it belongs to an older incarnation.
                    log.warning("rlmm_snapshot_ahead_of_topic", partition=mp, applied=st.applied, end=high)
                    self._drop(mp)
                    self._states[mp] = _PartitionState()
                    self.stats.replays_from_beginning.add(mp)
                    self._changed = True
                    continue
                low = starts.get(mp)
                if low is not None and st.applied >= 0 and st.applied + 1 < low:
                    log.warning("rlmm_records_lost_to_retention", partition=mp, applied=st.applied, start=low)
                st.log_start = low
                st.end_target = high
                # nothing left to read: caught up, or every record is gone to retention
                if (st.applied + 1 >= high or (st.applied < 0 and low is not None and low >= high)) \
                        and not st.ready:
                    st.ready = True
                    log.info("rlmm_partition_ready", partition=mp, offset=st.applied)
            self._cond.notify_all()

    def _handle(self, msgs: list[Message]) -> None:
        decoded: list[tuple[int, int, RemoteLogMetadata | None]] = []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("rlmm_consumer_error", error=err.str(), fatal=err.fatal())
                continue
            mp, off = msg.partition(), msg.offset()
            if mp is None or off is None:
                continue
            try:
                decoded.append((mp, off, deserialize(msg.value() or b"", partition=mp, offset=off,
                                                     source=self._cfg.topic_name)))
            except MetadataDecodeError as e:
                log.error("rlmm_undecodable_record", partition=mp, offset=off, error=str(e))
                self.stats.decode_errors += 1
                decoded.append((mp, off, None))
        with self._cond:
            for mp, off, event in decoded:
                st = self._states.get(mp)
                if st is None or st.reassign or off <= st.applied:
                    continue  # stale: from before a (pending) reassignment
                self.stats.records_consumed += 1
                st.applied = off
                if event is None:
                    continue
                if isinstance(event, RemoteLogSegmentMetadataSnapshot):
                    log.error("rlmm_unexpected_snapshot_record", partition=mp, offset=off)
                    self.stats.records_skipped += 1
                    continue
                try:
                    applied = self._cache.apply(event)
                except Exception as e:  # a bug must not stop the consumer (Kafka's would stop for good)
                    log.exception("rlmm_apply_failed", partition=mp, offset=off, error=str(e))
                    applied = False
                if applied:
                    self.stats.records_applied += 1
                else:
                    self.stats.records_rejected += 1
                    st.rejected[off] = None
                    while len(st.rejected) > _REJECTED_KEEP:
                        st.rejected.popitem(last=False)
            for mp, st in self._states.items():
                if not st.ready and st.end_target is not None and st.applied + 1 >= st.end_target:
                    st.ready = True
                    log.info("rlmm_partition_ready", partition=mp, offset=st.applied)
            self._cond.notify_all()

    def _write_snapshots(self, partitions: set[int]) -> None:
        """Snapshot dirty metadata partitions, then the committed-offsets file (in that order)."""
        assert self._snapshots is not None
        self._last_snapshot = time.monotonic()
        todo: list[tuple[int, int, bytes]] = []
        with self._cond:
            for mp in sorted(partitions):
                st = self._states.get(mp)
                if st is None or st.applied == st.snapshot_offset or st.applied < 0:
                    continue
                tps = [tp for tp in self._cache.partitions()
                       if self._partitioner.metadata_partition(tp) == mp]
                todo.append((mp, st.applied, self._cache.to_snapshot_bytes(tps)))
        if not todo:
            return
        try:
            self._snapshots.save({mp: (off, data) for mp, off, data in todo})
        except OSError as e:
            log.error("rlmm_snapshot_write_failed", error=str(e))
            return
        with self._cond:
            for mp, off, _ in todo:
                if (st := self._states.get(mp)) is not None:
                    st.snapshot_offset = off
            self.stats.snapshots_written += len(todo)
