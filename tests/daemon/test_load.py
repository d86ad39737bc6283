"""The daemon's full pass at a reduced scale of ``benchmarks/bench_load.py`` (which measures 1,000
partitions and 100,000 remote segments): every partition is visited once, no task fails, every
remote segment is seen by the expiry scan and none is deleted (retention is off), and the status
file written at stop holds every partition. Outcomes only: the benchmark reports the times."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rlmm.file import FileRemoteLogMetadataManager

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

PARTITIONS, SEGMENTS = 60, 3000


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_load", ROOT / "benchmarks" / "bench_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_load", module)
    spec.loader.exec_module(module)
    return module


def test_one_pass_visits_every_partition_and_scans_every_segment(tmp_path: Path) -> None:
    bench = _bench()
    tips = bench.synthesize(tmp_path, PARTITIONS, SEGMENTS)
    res = bench.one_pass(tmp_path, threads=4)
    assert res["failed_tasks"] == 0 and res["errors"] == []
    assert res["managed"] == res["visited"] == PARTITIONS
    assert res["remote_segments_seen"] == SEGMENTS

    status = json.loads((tmp_path / "work" / "status.json").read_text())
    parts = status["partitions"]
    assert len(parts) == PARTITIONS
    assert all(
        st["last_run_ms"] > 0 and st["last_error"] is None and st["role"] == "leader" for st in parts.values()
    )
    assert sum(st["remote_segments"] for st in parts.values()) == SEGMENTS

    m = FileRemoteLogMetadataManager.open(tmp_path / "work" / "metadata")
    try:
        m.on_partition_leadership_changes(set(tips), set())
        per_partition = [len(list(m.list_remote_log_segments(tip))) for tip in tips]
    finally:
        m.close()
    assert sum(per_partition) == SEGMENTS and min(per_partition) == SEGMENTS // PARTITIONS
