"""Structured Streaming: newly tiered segments become micro-batches (``spark.readStream``).

Offsets are Kafka's JSON, ``{"topic": {"0": 123}}`` (string keys, sorted), the *next* offset to
read per partition. ``latestOffset`` is each partition's remote log end: a segment shows up in a
micro-batch once it is COPY_SEGMENT_FINISHED. Segments are immutable, so replaying a batch from
the checkpoint reads the same records; offsets that remote retention removed before they were
read are the ``failOnDataLoss`` case. ``Trigger.AvailableNow`` works through Spark's wrapper
(it takes ``latestOffset`` once). ``read()`` runs on a reader Spark creates on the executor, so
a task carries everything it needs (:class:`fetcher.spark.planner.Task`).

The driver's instance lives as long as the query and asks for offsets and partitions on every
micro-batch, so it opens one read core (storage, metadata followed, index cache in a scratch
dir) on first use and keeps it until Spark calls :meth:`TieredStreamReader.stop`: opening one per
call would reload the metadata (and wait for the metadata topic) twice a micro-batch. The
metadata stores follow new segments by themselves; the core caches plans for about a second.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from fetcher.core import RemoteFetcher
from fetcher.spark import planner
from fetcher.spark.batch import TieredPartition, TieredReader
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
        self.opts = opts
        self.batch = TieredReader(opts, schema)  # storage plugin + Arrow target, for read()
        self._core: RemoteFetcher | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What executors get for ``read()``: never the driver's open core."""
        state = self.__dict__.copy()
        state["_core"] = state["_scratch"] = None
        return state

    def _fetcher(self) -> RemoteFetcher:
        """The driver's read core, opened on first use and kept for the query's life."""
        if self._core is None:
            scratch = tempfile.TemporaryDirectory(prefix="rlm-spark-stream-")
            try:
                self._core = planner.open_fetcher(planner.daemon_config(self.opts), Path(scratch.name))
            except BaseException:
                scratch.cleanup()
                raise
            self._scratch = scratch
        return self._core

    def stop(self) -> None:
        """Spark ends the query: close the core and remove its scratch dir."""
        core, scratch, self._core, self._scratch = self._core, self._scratch, None, None
        try:
            if core is not None:
                core.close()
        finally:
            if scratch is not None:
                scratch.cleanup()

    def _points(self, start: bool) -> Offsets:
        fetcher = self._fetcher()
        points = {}
        for tp in planner.selected_partitions(fetcher, self.opts, planner.PushedBounds()):
            plan = fetcher.plan(tp)
            if start:
                points[(tp.topic, tp.partition)] = planner.resolve_range(fetcher, plan, self.opts)[0]
            else:  # read_committed: a micro-batch never passes the LSO (the next one goes on from it)
                committed = planner.committed_bound(fetcher, tp, self.opts, plan.log_end)
                points[(tp.topic, tp.partition)] = (plan.log_end if committed is None
                                                    else min(plan.log_end, committed.stable_offset))
        return _json(points)

    def initialOffset(self) -> Offsets:
        return self._points(start=True)

    def latestOffset(self) -> Offsets:  # type: ignore[override]  # the 4.0/4.1 form; 4.2+ accepts it
        return self._points(start=False)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        if start == end:
            return []
        fetcher = self._fetcher()
        tasks: list[planner.Task] = []
        for tp in planner.selected_partitions(fetcher, self.opts, planner.PushedBounds()):
            hi = end.get(tp.topic, {}).get(str(tp.partition))
            if hi is None:
                continue
            plan = fetcher.plan(tp)
            lo = start.get(tp.topic, {}).get(str(tp.partition), plan.log_start)
            planner.check_data_loss(plan, lo, min(hi, plan.log_end), self.opts.fail_on_data_loss)
            committed = planner.committed_bound(fetcher, tp, self.opts, hi)
            tasks += planner.range_tasks(fetcher, plan, lo, hi, self.opts.split_bytes, committed)
        return [TieredPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.batch.read(partition)
