"""``kafka-tiered`` over the real mini HDFS (fsspec plugin, ``webhdfs://``), and a backfill to ``hdfs://``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import fetcher.spark
from rlm.cli import build_parser
from rlm.commands.backfill import backfill
from tests.spark.helpers import T0, as_tuples, expected_rows, tier

pytestmark = [pytest.mark.hdfs, pytest.mark.spark, pytest.mark.slow]
HOUR = 3_600_000


def test_read_from_hdfs_and_backfill_to_hdfs(spark: Any, hdfs: Any, hdfs_path: str, tmp_path: Path) -> None:
    url = f"{hdfs.url_prefix}{hdfs_path}/tiered"
    storage = {"plugin": "fsspec", "config": {"url": url, "storage_options": {"user": hdfs.user}}}
    cf = tier(tmp_path, [("hdfs-events", 0, 240)], storage=storage, step_ms=60_000)
    logs = tmp_path / "logs"
    fetcher.spark.register(spark)
    df = (spark.read.format("kafka-tiered").option("rlm.config", str(cf)).option("subscribe", "hdfs-events")
          .option("includeHeaders", "true").option("rlm.splitBytes", "20000").load())
    want = expected_rows(logs, "hdfs-events", 0)
    assert as_tuples(df.collect()) == want

    start = (T0 // HOUR + 1) * HOUR
    out = f"{hdfs.hdfs_url}{hdfs_path}/backfill"
    args = build_parser().parse_args(["backfill", "--config", str(cf), "--topic", "hdfs-events", "--from",
                                      str(start), "--to", str(start + 2 * HOUR), "--output", out])
    assert backfill(args, spark) == 0
    back = sorted((r.offset, r.value) for r in spark.read.parquet(out).collect())
    committed = expected_rows(logs, "hdfs-events", 0, committed=True)
    assert back == [(r[4], r[1]) for r in committed if start <= r[5] < start + 2 * HOUR]
