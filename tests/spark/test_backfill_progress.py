"""``rlm backfill``'s progress (issue 39, item 5): one line drawn from one place (rows, bytes,
stages, tasks, ETA), Spark's console bar off, and it goes on past stage 0."""

from __future__ import annotations

import io
from typing import Any

import pytest

from rlm.commands.backfill_progress import Snapshot, from_stages, progress_line, render

MiB = 1024 * 1024


def test_the_line_says_rows_bytes_stages_and_eta() -> None:
    stages = [
        {"status": "COMPLETE", "numTasks": 4, "numCompleteTasks": 4, "outputRecords": 1000,
         "outputBytes": MiB},
        {"status": "ACTIVE", "numTasks": 4, "numCompleteTasks": 0, "outputRecords": 0, "outputBytes": 0},
        {"status": "SKIPPED", "numTasks": 9, "numCompleteTasks": 0},
    ]
    snap = from_stages(stages)
    assert snap == Snapshot(stages_done=1, stages_running=1, tasks_done=4, tasks_total=8, rows=1000,
                            bytes=MiB)
    assert render(snap, 10.0) == "1,000 rows, 1.0 MiB written; stages 1 done, 1 running; tasks 4/8; ETA ~10s"
    assert render(Snapshot(), 1.0).endswith("tasks 0/0; ETA -")
    assert "rows" not in render(Snapshot(tasks_total=2, tasks_done=1, exact=False), 1.0)


@pytest.mark.spark
@pytest.mark.slow
def test_progress_lines_follow_every_stage(spark: Any) -> None:
    """Not a terminal: one line per finished stage, with the rows written, for every stage of a
    two-stage job (the old lines stopped after stage 0)."""
    out = io.StringIO()
    with progress_line(spark, out, every_s=0.05):
        df = spark.range(0, 20_000, numPartitions=4)
        df.groupBy((df.id % 7).alias("k")).count().write.mode("overwrite").format("noop").save()
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("rlm backfill: ")]
    assert lines, out.getvalue()
    assert "\r" not in out.getvalue(), "no redraws when the stream is not a terminal"
    last = lines[-1]
    assert int(last.split("stages ")[1].split(" done")[0]) >= 2, lines
    assert "ETA" in last and "tasks" in last, last
