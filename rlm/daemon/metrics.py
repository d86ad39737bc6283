"""Prometheus metrics of the daemon, in a registry of their own (one per daemon, so tests can run several).

Names follow Prometheus conventions (``_total`` counters, ``_bytes`` units). Per-partition series
carry ``topic`` and ``partition`` labels; they are removed when a partition leaves this node.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from rlm.types import TopicPartition


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
            "LSO minus (highest remote offset + 1): offsets not yet tiered",
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
        self.local_size = Gauge("rlm_local_log_size_bytes", "Bytes of local segments", labels, registry=r)
        self.local_segments = Gauge("rlm_local_log_segments", "Local segments", labels, registry=r)
        self.gap_segments = Counter(
            "remote_copy_gap_segments",
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
        self.up = Gauge("rlm_up", "1 while the daemon runs", registry=r)

    def error(self, exc: BaseException, task: str) -> None:
        self.errors.labels(type(exc).__name__, task).inc()

    def forget(self, tp: TopicPartition) -> None:
        """Drop the gauges of a partition that left this node (counters stay: they are totals)."""
        labels = (tp.topic, str(tp.partition))
        for g in (
            self.copy_lag_offsets,
            self.copy_lag_segments,
            self.remote_log_size,
            self.remote_segments,
            self.local_size,
            self.local_segments,
            self.copy_lag_near_retention,
        ):
            with contextlib.suppress(KeyError):
                g.remove(*labels)

    def render(self) -> bytes:
        return generate_latest(self.registry)
