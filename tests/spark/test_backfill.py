"""``rlm backfill`` on a local SparkSession: Parquet by hour, run twice (idempotent), read back."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from rlm.cli import build_parser
from rlm.commands.backfill import backfill
from tests.spark.helpers import T0, expected_rows, spark_ms, tier

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HOUR = 3_600_000


def args_for(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(["backfill", *argv])


def test_backfill_twice_is_idempotent(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cf = tier(tmp_path, [("clicks", 0, 330), ("clicks", 1, 200)], step_ms=60_000)
    logs = tmp_path / "logs"
    start = (T0 // HOUR + 1) * HOUR
    end = start + 2 * HOUR
    out = tmp_path / "out"
    argv = ["--config", str(cf), "--topic", "clicks", "--from", str(start), "--to", str(end),
            "--output", str(out), "--partition-by", "hour"]
    want = sorted((r[3], r[4], r[1]) for p in (0, 1) for r in expected_rows(logs, "clicks", p, committed=True)
                  if start <= r[5] < end)
    assert len(want) > 1000
    for _ in range(2):
        assert backfill(args_for(argv), spark) == 0
        summary = capsys.readouterr().out.strip().splitlines()[-1]
        assert f"{len(want)} rows" in summary and "in 2 partitions" in summary
        back = spark.read.parquet(str(out))
        got = sorted((r.partition, r.offset, r.value) for r in back.collect())
        assert got == want
        hours = {(r.date, r.hour) for r in back.select("date", "hour").distinct().collect()}
        assert len(hours) == 2
        ts = [spark_ms(r.timestamp) for r in back.select("timestamp").collect()]
        assert min(ts) >= start and max(ts) < end
    # a bad range fails with status 2 through the CLI error path, naming the argument
    bad = args_for([*argv[:4], "--from", "yesterday-ish", "--to", str(end), "--output", str(out)])
    with pytest.raises(Exception, match="--from"):
        backfill(bad, spark)
