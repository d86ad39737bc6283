"""A running remote compaction as ``rlm status`` and the metrics show it, while it runs.

A compaction of a 1 GiB range takes minutes (fetching the inputs, one or more offset-map passes,
writing, publishing); the ``compaction`` entry of the status only describes the last *finished*
replacement, so without this an operator cannot tell a compaction that progresses from one that
is stuck. :meth:`CompactionProgress.running` keeps, for the partition, a ``compaction_running``
record in the status board (the status file, ``rlm status``) and per-partition gauges
(``rlm_remote_compaction_running_*``), updated from the engine's progress callback
(:func:`rlm.compaction.compact` calls it after each pass, before writing and when done) and at
the job's own steps. The record and the gauges go when the block ends, whether the compaction
replaced segments, had nothing to do or failed: a record left behind would claim work that no
longer runs.

The record (all offsets inclusive, as the ``compaction`` entry's):

``phase``
    ``fetch`` (inputs and newer keys being read), then the engine's ``map`` (pass by pass) and
    ``write``, then ``publish`` (the copy protocol of the new segment) and ``delete`` (the inputs).
``start_offset``, ``end_offset``, ``segments``, ``input_bytes``
    the range being compacted.
``records_done`` / ``records_total``
    records of the input the offset map has covered so far, of all of them (0 until the engine
    has read the input's batch headers); the engine's unit of work.
``passes``
    offset-map passes finished (more than one when the map, sized by the memory budget, is full
    before the input ends).
``offset_map_bytes``, ``newer_keys_bytes``
    the memory granted by the daemon-wide budget (:mod:`rlm.daemon.compaction_budget`).
``started_ms``
    wall-clock start, for the operator's eye (nothing computes with it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rlm.compaction import CompactionResult
from rlm.daemon.clock import wall_ms
from rlm.daemon.compaction_budget import CompactionBudget
from rlm.daemon.metrics import DaemonMetrics
from rlm.daemon.status import StatusBoard
from rlm.types import RemoteLogSegmentMetadata, TopicIdPartition


class RunningCompaction:
    """One partition's running record; :meth:`engine` is the engine's progress callback."""

    def __init__(self, tp: TopicIdPartition, status: StatusBoard, metrics: DaemonMetrics,
                 record: dict[str, Any]) -> None:
        self._tp = tp
        self._status = status
        self._metrics = metrics
        self._labels = (tp.topic, str(tp.partition))
        self.record = record
        self._show()

    def _show(self) -> None:
        # a new dict each time (never mutated in place): the status board copies it under its lock
        self._status.partition(self._tp.topic, self._tp.partition).compaction_running = dict(self.record)
        m, r = self._metrics, self.record
        m.compaction_running_records.labels(*self._labels).set(r["records_done"])
        m.compaction_running_input_records.labels(*self._labels).set(r["records_total"])
        m.compaction_running_input_bytes.labels(*self._labels).set(r["input_bytes"])
        m.compaction_running_passes.labels(*self._labels).set(r["passes"])
        m.compaction_running_started.labels(*self._labels).set(r["started_ms"] / 1000)

    def phase(self, name: str) -> None:
        """The job moved to a step of its own (``publish``, ``delete``)."""
        self.record = {**self.record, "phase": name}
        self._show()

    def engine(self, result: CompactionResult) -> None:
        """The engine's callback (:data:`rlm.compaction.engine.Progress`)."""
        self.record = {**self.record, "phase": result.phase, "records_done": result.records_mapped,
                       "records_total": result.records_read, "passes": result.passes}
        self._show()

    def _clear(self) -> None:
        self._status.partition(self._tp.topic, self._tp.partition).compaction_running = None
        for g in (self._metrics.compaction_running_records, self._metrics.compaction_running_input_records,
                  self._metrics.compaction_running_input_bytes, self._metrics.compaction_running_passes,
                  self._metrics.compaction_running_started):
            with contextlib.suppress(KeyError):  # never set (or a concurrent forget): nothing to remove
                g.remove(*self._labels)


class CompactionProgress:
    """The daemon's running compactions, shown in the status board and the metrics (with the
    memory ``budget``'s reservations and cap, read at scrape time)."""

    def __init__(self, status: StatusBoard, metrics: DaemonMetrics, budget: CompactionBudget) -> None:
        self.status = status
        self.metrics = metrics
        metrics.compaction_memory_reserved.set_function(lambda: budget.used)
        metrics.compaction_memory_cap.set(budget.cap)

    @contextmanager
    def running(self, tp: TopicIdPartition, inputs: tuple[RemoteLogSegmentMetadata, ...],
                offset_map_bytes: int, newer_keys_bytes: int) -> Iterator[RunningCompaction]:
        """Show a compaction of ``inputs`` for the ``with`` block; cleared when it ends, however."""
        record: dict[str, Any] = {
            "phase": "fetch",
            "start_offset": inputs[0].start_offset,
            "end_offset": inputs[-1].end_offset,
            "segments": len(inputs),
            "input_bytes": sum(md.segment_size_in_bytes for md in inputs),
            "records_done": 0,
            "records_total": 0,
            "passes": 0,
            "offset_map_bytes": offset_map_bytes,
            "newer_keys_bytes": newer_keys_bytes,
            "started_ms": wall_ms(),
        }
        run = RunningCompaction(tp, self.status, self.metrics, record)
        try:
            yield run
        finally:
            run._clear()
