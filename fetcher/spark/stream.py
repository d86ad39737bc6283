"""Structured Streaming: newly tiered segments become micro-batches (``spark.readStream``).

Offsets are Kafka's JSON, ``{"topic": {"0": 123}}`` (string keys, sorted), the *next* offset to
read per partition. ``latestOffset`` is each partition's remote log end: a segment shows up in a
micro-batch once it is COPY_SEGMENT_FINISHED. Segments are immutable, so replaying a batch from
the checkpoint reads the same records; offsets that remote retention removed before they were
read are the ``failOnDataLoss`` case. ``Trigger.AvailableNow`` works through Spark's wrapper
(it takes ``latestOffset`` once). ``read()`` runs on a reader Spark creates on the executor, so
a task carries everything it needs (:class:`fetcher.spark.planner.Task`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from fetcher.spark import planner
from fetcher.spark.options import SourceOptions

Offsets = dict[str, dict[str, int]]


def _json(points: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, p), off in sorted(points.items()):
        out.setdefault(topic, {})[str(p)] = off
    return out


class TieredStreamReader(DataSourceStreamReader):
    """Micro-batches of tiered records; the driver instance is long-lived, executors get tasks."""

    def __init__(self, opts: SourceOptions, schema: Any) -> None:
        from fetcher.spark.source import TieredReader

        self.opts = opts
        self.batch = TieredReader(opts, schema)  # storage plugin + Arrow target, for read()

    def _points(self, start: bool) -> Offsets:
        config = planner.daemon_config(self.opts)
        with tempfile.TemporaryDirectory(prefix="rlm-spark-stream-") as scratch, \
                planner.open_fetcher(config, Path(scratch)) as fetcher:
            points = {}
            for tp in planner.selected_partitions(fetcher, self.opts, planner.PushedBounds()):
                plan = fetcher.plan(tp)
                points[(tp.topic, tp.partition)] = (planner.resolve_range(fetcher, plan, self.opts)[0]
                                                    if start else plan.log_end)
            return _json(points)

    def initialOffset(self) -> Offsets:
        return self._points(start=True)

    def latestOffset(self) -> Offsets:  # type: ignore[override]  # the 4.0/4.1 form; 4.2+ accepts it
        return self._points(start=False)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        from fetcher.spark.source import TieredPartition

        if start == end:
            return []
        config = planner.daemon_config(self.opts)
        tasks: list[planner.Task] = []
        with tempfile.TemporaryDirectory(prefix="rlm-spark-stream-") as scratch, \
                planner.open_fetcher(config, Path(scratch)) as fetcher:
            for tp in planner.selected_partitions(fetcher, self.opts, planner.PushedBounds()):
                hi = end.get(tp.topic, {}).get(str(tp.partition))
                if hi is None:
                    continue
                plan = fetcher.plan(tp)
                lo = start.get(tp.topic, {}).get(str(tp.partition), plan.log_start)
                planner.check_data_loss(plan, lo, min(hi, plan.log_end), self.opts.fail_on_data_loss)
                tasks += planner.range_tasks(fetcher, plan, lo, hi, self.opts.split_bytes)
        return [TieredPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.batch.read(partition)
