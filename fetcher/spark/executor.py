"""Executor side: decode one task's range through the pickled storage plugin.

Python workers are reused across tasks, so one :class:`fetcher.task.RangeScanner` per storage
plugin configuration is kept per process (its index cache in a scratch directory removed at
exit): consecutive tasks of the same segment share fetched indexes and chunks.
"""

from __future__ import annotations

import atexit
import hashlib
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import structlog

from fetcher.fetch import IsolationLevel
from fetcher.spark.planner import PushedBounds, Task
from fetcher.spark.schema import to_spark_batch
from fetcher.task import RangeScanner
from rlm.config import ReadConfig
from rlm.errors import RemoteSegmentDeletedError

log = structlog.get_logger(__name__)

_scanners: dict[str, RangeScanner] = {}
# A task reads its range once, in order: a small chunk cache with one chunk of read-ahead is enough,
# and keeps each Python worker's memory low (Spark runs one per core). The decoder reads each chunk
# in place (fetcher.scan), so chunks are 16 MiB: fewer decoder calls and cut batches than 8 MiB,
# while 32 MiB ones fall out of the CPU caches (measured with benchmarks/bench_spark.py).
_EXECUTOR_READ = ReadConfig.model_validate({"chunk_bytes": 16 << 20, "chunk_cache_bytes": 48 << 20,
                                            "read_ahead_chunks": 1})
_lock = threading.Lock()


def storage_key(rsm: Any) -> str:
    """Identity of a plugin configuration (the pickled bytes), to share scanners between tasks."""
    return hashlib.sha256(pickle.dumps(rsm)).hexdigest()


def scanner_for(key: str, rsm: Any) -> RangeScanner:
    with _lock:
        sc = _scanners.get(key)
        if sc is None:
            sc = _scanners[key] = RangeScanner(rsm, read=_EXECUTOR_READ)
        return sc


@atexit.register
def _close_all() -> None:
    with _lock:
        for sc in _scanners.values():
            sc.close()
            sc.rsm.close()
        _scanners.clear()


def read_task(task: Task, *, rsm: Any, key: str, target: pa.Schema, isolation: IsolationLevel,
              pushed: PushedBounds, fail_on_data_loss: bool, max_batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Arrow batches of exactly ``target``'s schema for the task's ranges, in offset order."""
    scanner = scanner_for(key, rsm)
    headers = "headers" in target.names
    for read in task.reads:
        try:
            for batch in scanner.scan(task.tp, read.rng, next_link=read.next_link, isolation=isolation,
                                      include_headers=headers, max_batch_rows=max_batch_rows,
                                      aborted=read.aborted):
                if pushed.ts_lo_us is not None or pushed.ts_hi_us is not None:
                    batch = _timestamp_filter(batch, pushed)
                    if not batch.num_rows:
                        continue
                yield to_spark_batch(batch, target)
        except RemoteSegmentDeletedError as e:
            rng = read.rng
            if fail_on_data_loss:
                raise RemoteSegmentDeletedError(
                    f"{task.tp.topic}-{task.tp.partition}: offsets {rng.start}..{rng.end - 1} were deleted "
                    f"from remote storage after planning ({e}); set failOnDataLoss=false to skip them") from e
            log.warning("spark.data_loss_skipped", partition=str(task.tp),
                        offsets=f"{rng.start}..{rng.end - 1}", error=str(e))


def _timestamp_filter(batch: pa.RecordBatch, pushed: PushedBounds) -> pa.RecordBatch:
    """Apply the timestamp filters Spark handed over (it no longer checks them itself)."""
    us = batch.column("timestamp").to_numpy().astype("datetime64[ms]").astype(np.int64) * 1000
    keep = np.ones(len(us), dtype=bool)
    if pushed.ts_lo_us is not None:
        keep &= us >= pushed.ts_lo_us
    if pushed.ts_hi_us is not None:
        keep &= us <= pushed.ts_hi_us
    return batch if keep.all() else batch.filter(pa.array(keep))
