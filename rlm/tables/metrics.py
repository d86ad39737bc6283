"""Prometheus metrics of ``rlm iceberg`` (a registry of its own: several writers per process).

``rlm_iceberg_segments_behind`` / ``rlm_iceberg_offsets_behind`` (per table and partition): the
lag measured after each pass (:mod:`rlm.tables.lag`); ``rlm_iceberg_rows_per_second``: the
rows of the last pass that added any, over its duration; ``rlm_iceberg_last_commit_timestamp_seconds``:
the newest append of segments; counters of rows, segments and commit conflicts.
``rlm iceberg --follow --metrics-port N`` serves them on ``:N/metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from rlm.tables.lag import TableLag


class IcebergMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        part = ("table", "topic", "partition")
        self.segments_behind = Gauge(
            "rlm_iceberg_segments_behind",
            "Lineage remote segments not yet in the Iceberg table",
            part,
            registry=r,
        )
        self.offsets_behind = Gauge(
            "rlm_iceberg_offsets_behind", "Remote offsets past the end of the Iceberg table", part, registry=r
        )
        self.waiting = Gauge(
            "rlm_iceberg_segments_waiting",
            "Segments past the read_committed bound (transactions undecided)",
            ("table",),
            registry=r,
        )
        self.last_commit = Gauge(
            "rlm_iceberg_last_commit_timestamp_seconds",
            "When the newest snapshot adding segments was committed",
            ("table",),
            registry=r,
        )
        self.rows_per_second = Gauge(
            "rlm_iceberg_rows_per_second",
            "Rows per second of the last pass that added rows",
            ("table",),
            registry=r,
        )
        self.rows = Counter(
            "rlm_iceberg_rows_written", "Rows appended to the Iceberg table", ("table",), registry=r
        )
        self.segments = Counter(
            "rlm_iceberg_segments_written",
            "Remote segments appended to the Iceberg table",
            ("table",),
            registry=r,
        )
        self.conflicts = Counter(
            "rlm_iceberg_commit_conflicts",
            "Commits that found another writer's commit first",
            ("table",),
            registry=r,
        )

    def record_pass(self, table: str, segments: int, rows: int, conflicts: int, seconds: float) -> None:
        self.segments.labels(table).inc(segments)
        self.rows.labels(table).inc(rows)
        self.conflicts.labels(table).inc(conflicts)
        if rows and seconds > 0:
            self.rows_per_second.labels(table).set(rows / seconds)

    def record_lag(self, lag: TableLag) -> None:
        for p in lag.partitions:
            self.segments_behind.labels(lag.table, lag.topic, str(p.partition)).set(p.segments_behind)
            self.offsets_behind.labels(lag.table, lag.topic, str(p.partition)).set(p.offsets_behind)
        self.waiting.labels(lag.table).set(lag.waiting)
        if lag.last_commit_ms >= 0:
            self.last_commit.labels(lag.table).set(lag.last_commit_ms / 1000)

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
