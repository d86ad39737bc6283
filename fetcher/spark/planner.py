"""Driver-side planning: options -> per-partition offset ranges -> Spark input partitions.

Everything about *which* bytes hold *which* offsets comes from the read core
(:meth:`RemoteFetcher.plan`, :meth:`RemoteFetcher.plan_scan`, the remote index cache): only
COPY_SEGMENT_FINISHED segments on the current epoch lineage, overlapping segments deduplicated,
gaps known. Here the requested range is resolved with Spark's Kafka semantics, data loss is
judged (``failOnDataLoss``), and each planned range is cut on offset-index entries into pieces of
about ``rlm.splitBytes`` so a large segment becomes several tasks.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from fetcher import AbortedTxn, CommittedBound, ScanRange
from fetcher.broker import BrokerOffsets
from fetcher.core import RemoteFetcher
from fetcher.fetch import IsolationLevel
from fetcher.planning import PartitionPlan, PlannedSegment
from fetcher.spark.options import EARLIEST, LATEST, SourceOptions
from rlm.config import DaemonConfig, load_config
from rlm.errors import ConfigError, OffsetOutOfRangeError
from rlm.types import TopicIdPartition

log = structlog.get_logger(__name__)


class DataLossError(OffsetOutOfRangeError):
    """Offsets the query asked for are not in remote storage (``failOnDataLoss=true``)."""


@dataclass(frozen=True)
class PushedBounds:
    """Filters the reader took from Spark: exact offset bounds ``[lo, hi)``, timestamp bounds in
    microseconds (inclusive), and topic/partition sets."""

    offset_lo: int | None = None
    offset_hi: int | None = None
    ts_lo_us: int | None = None
    ts_hi_us: int | None = None
    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None


@dataclass(frozen=True)
class RangeRead:
    """A range of one planned link, and the next link for read-ahead."""

    rng: ScanRange
    next_link: PlannedSegment | None
    #: read_committed: the aborted transactions overlapping the range, collected by the driver
    #: over the whole plan and the frontier (``None``: read_uncommitted)
    aborted: tuple[AbortedTxn, ...] | None = None


@dataclass(frozen=True)
class Task:
    """One Spark task: consecutive ranges of one partition, about ``rlm.splitBytes`` together.

    A large segment is cut into several tasks; small consecutive segments (time-rolled segments of
    a quiet topic, a small ``segment.bytes``) are read by one task instead of one task each, since
    every task costs Spark a scheduling round trip and the Python worker a plugin call."""

    tp: TopicIdPartition
    reads: tuple[RangeRead, ...]

    @property
    def start(self) -> int:
        return self.reads[0].rng.start

    @property
    def end(self) -> int:
        return self.reads[-1].rng.end


def daemon_config(opts: SourceOptions) -> DaemonConfig:
    """The ``rlm run`` configuration named by ``rlm.config``, with the inline options on top."""
    path = Path(opts.rlm_config) if opts.rlm_config else None
    base = load_config(path)
    over: dict[str, Any] = {}
    if opts.storage:
        storage = dict(opts.storage)
        plugin = storage.pop("plugin", None)
        same = plugin in (None, base.storage.plugin)
        over["storage"] = {"plugin": plugin or base.storage.plugin,
                           "config": {**(base.storage.config if same else {}), **storage}}
    if opts.metadata:
        md = dict(opts.metadata)
        manager = md.pop("manager", None)
        over["metadata"] = {"manager": manager or base.metadata.manager,
                            "config": {**(base.metadata.config if manager in (None, base.metadata.manager)
                                          else {}), **md}}
    if opts.bootstrap_servers:
        over["bootstrap_servers"] = opts.bootstrap_servers
    if opts.work_dir:
        over["work_dir"] = opts.work_dir
    config = base if not over else load_config(path, **over)
    if not structlog.is_configured():
        # Spark's Python workers print to the driver's terminal: honour the config's log level
        # there (a quiet ``log_level: warning`` config keeps a spark-sql shell quiet).
        from rlm.logging_setup import configure_logging

        configure_logging(config.log_format, config.log_level)
    return config


def open_fetcher(config: DaemonConfig, scratch: Path) -> RemoteFetcher:
    """A read-only core whose index cache lives in ``scratch`` (not in the daemon's work dir)."""
    from rlm.plugin_setup import load_rlmm, load_rsm

    rsm = load_rsm(config, -1)
    try:
        rlmm = load_rlmm(config, -1, read_only=True)
    except BaseException:
        rsm.close()
        raise
    broker = (BrokerOffsets(config.bootstrap_servers, config.kafka_client)
              if config.bootstrap_servers else None)
    return RemoteFetcher(rsm, rlmm, work_dir=scratch, read=config.read,
                         index_cache_bytes=config.index_file_cache_total_size_bytes, owns_plugins=True,
                         broker=broker, log_dirs=config.log_dirs)


def load_storage(config: DaemonConfig) -> Any:
    """The storage plugin executors read through (configured here, pickled to them)."""
    from rlm.plugin_setup import load_rsm

    return load_rsm(config, -1)


def selected_partitions(fetcher: RemoteFetcher, opts: SourceOptions,
                        pushed: PushedBounds) -> list[TopicIdPartition]:
    topics = fetcher.topics()
    if opts.assign:
        out = []
        for topic, p in opts.assign:
            out.append(fetcher.partition(topic, p))  # UnknownTopicOrPartitionError names it
    else:
        if opts.subscribe:
            missing = [t for t in opts.subscribe if t not in topics]
            if missing:
                log.warning("spark.topics_without_remote_data", topics=missing)
        out = [tp for name, tps in topics.items() if opts.selects(name) for tp in tps]
    if pushed.topics is not None:
        out = [tp for tp in out if tp.topic in pushed.topics]
    if pushed.partitions is not None:
        out = [tp for tp in out if tp.partition in pushed.partitions]
    return out


def _ts_offset(fetcher: RemoteFetcher, tp: TopicIdPartition, ts: int) -> int | None:
    """KIP-33 lookup in the remote log, on this thread: planning is bulk work, not a consumer's
    request, so it does not go through the reader pool and its short wait budget."""
    return fetcher.locate_timestamp(tp, ts)


def resolve_range(fetcher: RemoteFetcher, plan: PartitionPlan, opts: SourceOptions) -> tuple[int, int]:
    """``[start, end)`` requested for the partition, before clamping to the remote range."""
    tp = plan.tp
    key = (tp.topic, tp.partition)
    start, end = plan.log_start, plan.log_end
    start_ts = opts.starting_timestamp
    if start_ts is None and opts.starting_by_timestamp is not None:
        start_ts = opts.starting_by_timestamp.get(key)
    if start_ts is not None:
        found = _ts_offset(fetcher, tp, start_ts)
        if found is None:
            if opts.timestamp_strategy == "error":
                raise ConfigError(f"kafka-tiered: no offset of {tp.topic}-{tp.partition} has a timestamp >= "
                                  f"{start_ts} (startingOffsetsByTimestampStrategy=error)")
            found = plan.log_end
        start = found
    elif opts.starting is not None and key in opts.starting:
        off = opts.starting[key]
        start = plan.log_start if off == EARLIEST else off
    end_ts = opts.ending_timestamp
    if end_ts is None and opts.ending_by_timestamp is not None:
        end_ts = opts.ending_by_timestamp.get(key)
    if end_ts is not None:
        found = _ts_offset(fetcher, tp, end_ts)
        end = plan.log_end if found is None else found
    elif opts.ending is not None and key in opts.ending:
        off = opts.ending[key]
        end = plan.log_end if off == LATEST else off
    return start, max(start, end)


def check_data_loss(plan: PartitionPlan, start: int, end: int, fail: bool) -> None:
    """Offsets in ``[start, end)`` that remote storage does not have: fail, or log and skip."""
    missing = []
    if start < plan.log_start:
        missing.append((start, min(end, plan.log_start) - 1))
    missing += [(max(lo, start), min(hi, end - 1)) for lo, hi in plan.gaps if lo < end and hi >= start]
    if end > plan.log_end:
        missing.append((max(start, plan.log_end), end - 1))
    missing = [(lo, hi) for lo, hi in missing if lo <= hi]
    if not missing:
        return
    text = ", ".join(f"{lo}..{hi}" for lo, hi in missing)
    if fail:
        raise DataLossError(
            f"{plan.tp.topic}-{plan.tp.partition}: offsets {text} were requested but are not in remote "
            f"storage (remote range {plan.log_start}..{plan.log_end - 1}); set failOnDataLoss=false "
            f"to skip them", log_start=plan.log_start, log_end=plan.log_end)
    log.warning("spark.data_loss_skipped", partition=str(plan.tp), offsets=text)


def committed_bound(fetcher: RemoteFetcher, tp: TopicIdPartition, opts: SourceOptions,
                    end: int) -> CommittedBound | None:
    """read_committed: how far tasks may read (the partition's LSO, or the remote LSO when a
    transaction open at the remote end cannot be decided: logged) and the aborts past the remote
    end; ``None`` for read_uncommitted."""
    if opts.isolation is not IsolationLevel.READ_COMMITTED:
        return None
    committed = fetcher.committed_bound(tp.topic, tp.partition)
    if committed.limited and end > committed.stable_offset:
        log.warning("spark.read_committed_limited", partition=str(tp), stable_offset=committed.stable_offset,
                    why="a transaction open at the remote end is decided by records not tiered yet; "
                        "name the broker's log_dirs in rlm.config to read past it")
    return committed


def _approx_bytes(rng: ScanRange) -> int:
    """The segment bytes ``rng`` covers, estimated from its share of the segment's offsets."""
    md = rng.link.metadata
    span = max(md.end_offset - md.start_offset + 1, 1)
    return md.segment_size_in_bytes * (rng.end - rng.start) // span


def range_tasks(fetcher: RemoteFetcher, plan: PartitionPlan, start: int, end: int,
                split_bytes: int, committed: CommittedBound | None = None) -> list[Task]:
    """Tasks reading ``[start, end)`` of the partition (the core trims to the lineage's links);
    ``committed`` (read_committed): each range carries its aborted transactions. Ranges are cut to
    about ``split_bytes`` and consecutive small ones grouped up to it."""
    if start >= end:
        return []
    tp = plan.tp
    _, ranges = fetcher.plan_scan(tp.topic, tp.partition, start_offset=start, end_offset=end)
    tasks: list[Task] = []
    group: list[RangeRead] = []
    group_bytes = 0
    for rng in ranges:
        nxt = plan.after(rng.link)
        for piece in fetcher.split_range(rng, split_bytes):
            aborted = None if committed is None else fetcher.aborted_transactions(plan, piece, committed)
            size = _approx_bytes(piece)
            if group and group_bytes + size > split_bytes:
                tasks.append(Task(tp, tuple(group)))
                group, group_bytes = [], 0
            group.append(RangeRead(piece, nxt, aborted))
            group_bytes += size
    if group:
        tasks.append(Task(tp, tuple(group)))
    return tasks


def plan_tasks(opts: SourceOptions, pushed: PushedBounds) -> list[Task]:
    """The query's tasks, in topic/partition/offset order."""
    config = daemon_config(opts)
    with tempfile.TemporaryDirectory(prefix="rlm-spark-plan-") as scratch, \
            open_fetcher(config, Path(scratch)) as fetcher:
        tasks: list[Task] = []
        for tp in selected_partitions(fetcher, opts, pushed):
            plan = fetcher.plan(tp)
            start, end = resolve_range(fetcher, plan, opts)
            check_data_loss(plan, start, end, opts.fail_on_data_loss)
            if pushed.offset_lo is not None:
                start = max(start, pushed.offset_lo)
            if pushed.offset_hi is not None:
                end = min(end, pushed.offset_hi)
            if pushed.ts_lo_us is not None and start < end:
                ms = -(-pushed.ts_lo_us // 1000)  # earlier records all have smaller timestamps
                found = _ts_offset(fetcher, tp, ms)
                start = max(start, plan.log_end if found is None else found)
            committed = committed_bound(fetcher, tp, opts, end)
            if committed is not None:
                end = min(end, committed.stable_offset)
            tasks += range_tasks(fetcher, plan, start, end, opts.split_bytes, committed)
        log.info("spark.planned", tasks=len(tasks), partitions=len({t.tp for t in tasks}))
        return tasks
