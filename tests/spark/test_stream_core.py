"""The streaming source's driver side opens one read core for the query, not two per micro-batch.

Spark calls ``initialOffset`` once, then ``latestOffset`` and ``partitions`` for every
micro-batch, on one long-lived reader. Called here as Spark calls them (no SparkSession needed
for the driver side): the read-only metadata store is opened once, newly tiered data still shows
up in later micro-batches, the reader still pickles for executors, and ``stop()`` removes the
core's scratch dir.
"""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path

from structlog.testing import capture_logs

from fetcher.spark.options import parse_options
from fetcher.spark.schema import spark_schema
from fetcher.spark.stream import TieredStreamReader
from tests.daemon.helpers import wait_for
from tests.daemon.test_standalone import cfg_for, run_once
from tests.spark.helpers import tier, write_mixed

MICRO_BATCHES = 3


def _scratch_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("rlm-spark-stream-*")}


def test_one_read_core_for_the_whole_query(tmp_path: Path) -> None:
    cf = tier(tmp_path, [("st", 0, 200)])
    opts = parse_options({"rlm.config": str(cf), "subscribe": "st"})
    reader = TieredStreamReader(opts, spark_schema(opts.include_headers))
    before = _scratch_dirs()
    with capture_logs() as logs:
        start = reader.initialOffset()
        assert start == {"st": {"0": 0}}
        for _ in range(MICRO_BATCHES):
            end = reader.latestOffset()
            assert reader.partitions(start, end) or start == end
            start = end
        assert set(start["st"]) == {"0"}
        logs1 = tmp_path / "logs1"  # partition 1 tiered while the query runs
        write_mixed(logs1, "st", 1, 150)
        run_once(cfg_for(logs1, tmp_path / "work"))
        wait_for("newly tiered partition visible", lambda: "1" in reader.latestOffset()["st"])
        end = reader.latestOffset()
        tasks = reader.partitions(start, end)
        assert {t.task.tp.partition for t in tasks if t.task is not None} == {1}  # type: ignore[attr-defined]
    opened = [e for e in logs if e["event"] == "rlmm_file_store_opened_read_only"]
    assert len(opened) == 1  # one read core for every call above
    assert len(_scratch_dirs() - before) == 1
    clone = pickle.loads(pickle.dumps(reader))  # what executors get: no open core
    assert clone._core is None
    reader.stop()
    assert _scratch_dirs() - before == set()
