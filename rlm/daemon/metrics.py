"""Prometheus metrics of the daemon, in a registry of their own (one per daemon, so tests can run several).

Names follow Prometheus conventions (``_total`` counters, ``_bytes`` units). Per-partition series
carry ``topic`` and ``partition`` labels; they are removed when a partition leaves this node.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from rlm.types import TopicPartition

# ``*_created`` series (a timestamp per counter/histogram child) double the series count and
# nothing reads them; prometheus_client's switch is process-wide.
disable_created_metrics()  # type: ignore[no-untyped-call]


class DaemonMetrics:
    """Every metric the daemon exports; ``render()`` gives the text exposition format."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        labels = ("topic", "partition")
        self.bytes_copied = Counter(
            "rlm_remote_copy_bytes", "Bytes of .log files copied to remote storage", labels, registry=r
        )
        self.segments_copied = Counter(
            "rlm_remote_copy_segments", "Segments copied to remote storage", labels, registry=r
        )
        self.bytes_deleted = Counter(
            "rlm_remote_delete_bytes", "Bytes deleted from remote storage", labels, registry=r
        )
        self.segments_deleted = Counter(
            "rlm_remote_delete_segments",
            "Segments deleted from remote storage",
            ("topic", "partition", "reason"),
            registry=r,
        )
        self.copy_lag_offsets = Gauge(
            "rlm_remote_copy_lag_offsets",
            "Offsets in eligible segments (rolled, below the LSO) not yet copied (never the active segment)",
            labels,
            registry=r,
        )
        self.copy_lag_segments = Gauge(
            "rlm_remote_copy_lag_segments", "Eligible segments not yet copied", labels, registry=r
        )
        self.remote_log_size = Gauge(
            "rlm_remote_log_size_bytes", "Bytes of finished remote segments", labels, registry=r
        )
        self.remote_segments = Gauge(
            "rlm_remote_log_segments", "Finished remote segments", labels, registry=r
        )
        self.quarantined_segments = Gauge(
            "rlm_remote_segments_quarantined",
            "FINISHED segments off the leader-epoch lineage, kept until off_lineage_grace_ms ends",
            labels,
            registry=r,
        )
        # remote compaction (rlm/daemon/remote_compaction.py)
        self.compactions = Counter(
            "rlm_remote_compactions", "Remote compactions that replaced segments", labels, registry=r
        )
        self.compaction_bytes_before = Counter(
            "rlm_remote_compaction_bytes_before", "Bytes of the segments remote compactions replaced", labels,
            registry=r,
        )
        self.compaction_bytes_after = Counter(
            "rlm_remote_compaction_bytes_after", "Bytes of the compacted segments that replaced them", labels,
            registry=r,
        )
        self.compaction_records_removed = Counter(
            "rlm_remote_compaction_records_removed", "Records remote compactions removed", labels, registry=r
        )
        # a remote compaction while it runs (rlm/daemon/compaction_progress.py); removed when it ends
        self.compaction_running_records = Gauge(
            "rlm_remote_compaction_running_records",
            "Records of the running compaction's input the offset map has covered so far", labels, registry=r,
        )
        self.compaction_running_input_records = Gauge(
            "rlm_remote_compaction_running_input_records",
            "Records in the running compaction's input (0 until its segments are read)", labels, registry=r,
        )
        self.compaction_running_input_bytes = Gauge(
            "rlm_remote_compaction_running_input_bytes", "Bytes of the running compaction's input segments",
            labels, registry=r,
        )
        self.compaction_running_passes = Gauge(
            "rlm_remote_compaction_running_passes", "Offset-map passes the running compaction has finished",
            labels, registry=r,
        )
        self.compaction_running_started = Gauge(
            "rlm_remote_compaction_running_started_seconds",
            "Unix time the running compaction started", labels, registry=r,
        )
        # the daemon-wide memory cap of compaction (rlm/daemon/compaction_budget.py)
        self.compaction_memory_reserved = Gauge(
            "rlm_remote_compaction_memory_reserved_bytes",
            "Key-map memory reserved by running remote compactions (never above the cap)", registry=r,
        )
        self.compaction_memory_cap = Gauge(
            "rlm_remote_compaction_memory_cap_bytes", "remote_compaction_memory_bytes", registry=r,
        )
        self.local_size = Gauge("rlm_local_log_size_bytes", "Bytes of local segments", labels, registry=r)
        self.local_segments = Gauge("rlm_local_log_segments", "Local segments", labels, registry=r)
        self.gap_segments = Counter(
            "rlm_remote_copy_gap_segments",
            "Offset ranges the broker deleted locally before they were copied (data never tiered)",
            labels,
            registry=r,
        )
        self.gap_offsets = Counter(
            "rlm_remote_copy_gap_offsets", "Offsets lost to copy gaps", labels, registry=r
        )
        self.copy_lag_near_retention = Gauge(
            "rlm_remote_copy_lag_near_local_retention",
            "1 when the oldest uncopied segment is close to local.retention.ms",
            labels,
            registry=r,
        )
        self.errors = Counter(
            "rlm_errors", "Errors by kind (exception class) and task", ("kind", "task"), registry=r
        )
        self.task_duration = Histogram(
            "rlm_task_duration_seconds",
            "Duration of a partition task run",
            ("task",),
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800),
        )
        self.partitions = Gauge("rlm_partitions", "Partitions by role", ("role",), registry=r)
        self.unprotected = Gauge(
            "rlm_partitions_unprotected",
            "1 while a partition the sidecar is configured to tier cannot be (e.g. its topic id is unknown)",
            labels,
            registry=r,
        )
        self.up = Gauge("rlm_up", "1 while the daemon runs", registry=r)
        self.dependency_up = Gauge(
            "rlm_dependency_up",
            "1 while the last health check of a dependency (storage, metadata, cluster) succeeded",
            ("dependency",),
            registry=r,
        )
        self.copies_in_flight = Gauge(
            "rlm_remote_copy_in_flight", "Segment copies started and not yet finished", registry=r
        )
        self.copy_in_flight_age = Gauge(
            "rlm_remote_copy_in_flight_oldest_age_seconds",
            "Age of the oldest segment copy still in flight (0 when none): a stuck copy grows it",
            registry=r,
        )

    def watch_in_flight(self, started: Callable[[], list[float]]) -> None:
        """Compute the in-flight gauges at scrape time from ``started()`` (monotonic start times)."""
        self.copies_in_flight.set_function(lambda: len(started()))
        self.copy_in_flight_age.set_function(
            lambda: max((time.monotonic() - t for t in started()), default=0.0)
        )

    def error(self, exc: BaseException, task: str) -> None:
        self.errors.labels(type(exc).__name__, task).inc()

    @staticmethod
    def total(metric: Counter | Gauge) -> int:
        """A counter's (``_total`` samples) or a gauge's sum over every label set."""
        return int(sum(s.value for m in metric.collect() for s in m.samples
                       if isinstance(metric, Gauge) or s.name.endswith("_total")))

    def copied_totals(self) -> tuple[int, int]:
        """(segments, bytes) copied by this daemon so far, over every partition."""
        return self.total(self.segments_copied), self.total(self.bytes_copied)

    def forget(self, tp: TopicPartition) -> None:
        """Drop the gauges of a partition that left this node (counters stay: they are totals)."""
        labels = (tp.topic, str(tp.partition))
        for g in (
            self.copy_lag_offsets,
            self.copy_lag_segments,
            self.remote_log_size,
            self.remote_segments,
            self.quarantined_segments,
            self.local_size,
            self.local_segments,
            self.copy_lag_near_retention,
            self.compaction_running_records,
            self.compaction_running_input_records,
            self.compaction_running_input_bytes,
            self.compaction_running_passes,
            self.compaction_running_started,
        ):
            with contextlib.suppress(KeyError):
                g.remove(*labels)

    def render(self) -> bytes:
        return generate_latest(self.registry)
