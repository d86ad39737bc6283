"""``rlm demo``: writes a log dir, tiers it with the embedded defaults, reads a record back from remote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import rsm_plugins
from rlm.log.checkpoints import read_partition_metadata
from rlm.log.partition import PartitionDir
from rlm.types import TopicIdPartition
from rlmm.file import FileRemoteLogMetadataManager
from tests.daemon.helpers import check_segment_against_local, finished

ROOT = Path(__file__).resolve().parents[2]


def test_demo_end_to_end(tmp_path: Path) -> None:
    d = tmp_path / "demo"
    res = subprocess.run(
        [sys.executable, "-m", "rlm.cli", "demo", "--dir", str(d), "--size-mb", "8"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "compacted_topic_refused" in res.stderr
    assert "orders-0 offset 0" in res.stdout and '"order_id": 0' in res.stdout
    copied = re.search(r"copied (\d+) segments, ([\d.]+) MB to ", res.stdout)
    assert copied is not None and int(copied.group(1)) > 0 and float(copied.group(2)) > 0, res.stdout
    assert re.search(r"timestamp \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", res.stdout), res.stdout
    assert "user-profiles: compacted" in res.stdout, "the refused topic is listed with its reason"

    status = subprocess.run(
        [sys.executable, "-m", "rlm.cli", "status", "--work-dir", str(d / "rlm-work"), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    parts = json.loads(status.stdout)["partitions"]
    assert set(parts) == {"orders-0", "orders-1", "payments-0", "clicks-0"}
    pay = parts["payments-0"]
    assert pay["remote_end"] < pay["lso"] < pay["local_end"], "the open transaction holds the LSO back"

    rsm = rsm_plugins.load("local", {"root": str(d / "remote-storage")})
    rlmm = FileRemoteLogMetadataManager.open(d / "rlm-work" / "metadata")
    try:
        for name in parts:
            pdir = PartitionDir(d / "kafka-logs" / name)
            topic, p = name.rsplit("-", 1)
            tip = TopicIdPartition(read_partition_metadata(pdir.path / "partition.metadata"), topic, int(p))
            rlmm.on_partition_leadership_changes({tip}, set())
            segs = finished(rlmm, tip)
            lso = parts[name]["lso"]
            want = [
                s.base_offset for s in pdir.inactive_segments() if pdir.next_segment(s).base_offset <= lso
            ]  # type: ignore[union-attr]
            assert [m.start_offset for m in segs] == want and want
            for m in segs:
                check_segment_against_local(rsm, m, pdir)
            if topic == "payments":  # the writer changed the leader epoch mid-way
                assert {e for m in segs for e, _ in m.segment_leader_epochs} == {0, 1}
    finally:
        rlmm.close()
        rsm.close()
