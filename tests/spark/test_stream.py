"""``spark.readStream.format("kafka-tiered")``: tiered segments as micro-batches, AvailableNow, resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import fetcher.spark
from tests.daemon.test_standalone import cfg_for, run_once
from tests.spark.helpers import expected_rows, tier, write_mixed

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_available_now_then_resume_with_newly_tiered_segments(spark: Any, tmp_path: Path) -> None:
    cf = tier(tmp_path, [("st", 0, 200)])
    fetcher.spark.register(spark)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> list[tuple[int, int, bytes]]:
        df = (spark.readStream.format("kafka-tiered").option("rlm.config", str(cf))
              .option("subscribe", "st").load())
        q = (df.select("partition", "offset", "value").writeStream.format("parquet")
             .option("path", str(out)).option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
        q.awaitTermination(600)
        assert q.exception() is None
        return sorted((r.partition, r.offset, r.value) for r in spark.read.parquet(str(out)).collect())

    want0 = [(0, r[4], r[1]) for r in expected_rows(tmp_path / "logs", "st", 0)]
    assert run() == want0
    # partition 1 is tiered later (another log dir, same remote storage and metadata store)
    logs1 = tmp_path / "logs1"
    write_mixed(logs1, "st", 1, 150)
    run_once(cfg_for(logs1, tmp_path / "work"))
    want1 = [(1, r[4], r[1]) for r in expected_rows(logs1, "st", 1)]
    assert run() == sorted(want0 + want1)  # resumed from the checkpoint: nothing read twice
