"""The batch half of ``kafka-tiered``: the reader Spark pickles to executors and its tasks.

Kept apart from :mod:`fetcher.spark.source` (the data source classes Spark looks up) and
:mod:`fetcher.spark.stream` (micro-batches), which both use it, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from fetcher.spark import executor, planner
from fetcher.spark.options import SourceOptions
from fetcher.spark.planner import PushedBounds, Task
from fetcher.spark.schema import arrow_schema


class TieredPartition(InputPartition):
    """One task: consecutive ranges of one partition (pickled alone and sent to its executor)."""

    def __init__(self, task: Task | None) -> None:
        super().__init__(task)
        self.task = task


class TieredReader(DataSourceReader):
    """Plans on the driver, reads on executors; small (pickled into every task)."""

    def __init__(self, opts: SourceOptions, schema: Any) -> None:
        config = planner.daemon_config(opts)
        self.opts = opts
        self.target = arrow_schema(schema)
        self.rsm = planner.load_storage(config)
        self.key = executor.storage_key(self.rsm)
        self.pushed = PushedBounds()

    def partitions(self) -> Sequence[InputPartition]:
        tasks = planner.plan_tasks(self.opts, self.pushed)
        return [TieredPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task = getattr(partition, "task", None)
        if task is None:  # Spark runs one task with InputPartition(None) when there are none
            return iter(())
        return executor.read_task(task, rsm=self.rsm, key=self.key, target=self.target,
                                  isolation=self.opts.isolation, pushed=self.pushed,
                                  fail_on_data_loss=self.opts.fail_on_data_loss,
                                  max_batch_rows=self.opts.max_batch_rows)
