"""The Spark source (``kafka-tiered``) over a compacted topic's tiered history: a remote segment
the broker's cleaner emptied at its end (recorded end offset 299, last record 279) and gaps inside
segments. Every remote record comes back once, in split tasks and whole, both isolation levels;
the expectation is decoded from the partition's own files, not from the read core."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import fetcher.spark
from rlm.log.records import iter_records
from tests.compacted.test_tail_segment import TOPIC, _batches, gap_at_a_segment_end

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.usefixtures("no_remote_compaction")]


@pytest.mark.parametrize("split_bytes", [None, "4096"])
def test_spark_reads_every_remote_record_across_compaction_gaps(
    spark: Any, tmp_path: Path, split_bytes: str | None
) -> None:
    cfg, pdir = gap_at_a_segment_end(tmp_path)
    fetcher.spark.register(spark)
    # the remote history: [0, 100) as first written (every offset), [100, 400) as the files are now
    first = list(range(100))
    later = [r.offset for b in _batches(pdir) for _, r in iter_records(b) if 100 <= r.offset < 400]
    for level in ("read_uncommitted", "read_committed"):
        r = (spark.read.format("kafka-tiered").option("rlm.config", str(cfg)).option("subscribe", TOPIC)
             .option("kafka.isolation.level", level))
        if split_bytes is not None:
            r = r.option("rlm.splitBytes", split_bytes)
        got = sorted(row.offset for row in r.load().select("offset").collect())
        assert got == first + later, level
