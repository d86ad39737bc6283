"""``rlm verify --deep`` after a restore checks the restored partition directory against the bucket.

Without a broker: a mixed partition is tiered under topic id A, adopted under a new topic id and
its newest segments restored into a new broker's directory (what ``rlm restore`` does). ``verify
--deep`` on the new cluster's configuration is clean; then each way the local log can betray the
bucket is made to happen and named: a flipped byte in a restored segment
(``local_segment_mismatch``), a ``DeleteRecords`` bound above the local log start that the broker
would not honour (``local_log_start``), a leader epoch that is not the lineage's
(``local_epochs``). (Before, ``verify --deep`` judged remote objects only and passed all three.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlm.cli import main
from rlm.config import load_config
from rlm.plugin_setup import load_rsm
from rlm.types import TopicIdPartition
from tests.daemon.test_restore_adopt import adopt_target
from tests.fetcher._tiered import Tiered, tier


@pytest.fixture
def tiered(tmp_path: Path) -> Tiered:
    t = tier(tmp_path / "source")
    (t.work / "rlm.yaml").write_text(json.dumps({
        "log_dirs": [str(t.logs)], "work_dir": str(t.work), "http": {"enabled": False}}))
    return t


def deep(capsys: pytest.CaptureFixture[str], cfg: Path, status: int) -> list[tuple[str, Any]]:
    capsys.readouterr()
    assert main(["verify", "--config", str(cfg), "--deep", "--json"]) == status
    (part,) = json.loads(capsys.readouterr().out)["partitions"]
    return [(p["kind"], p["offsets"]) for p in part["problems"]]


def test_verify_deep_checks_the_restored_partition_against_the_bucket(
        tiered: Tiered, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, new_id, pdir = adopt_target(tmp_path, tiered.work / "remote", "restored")
    src = ["--config", str(tiered.work / "rlm.yaml"), "--topic", tiered.tip.topic, "--to-topic", "restored",
           "--log-dir", str(tmp_path / "b-logs"), "--execute", "--json"]
    assert main(["restore", *src, "--adopt-into", str(cfg)]) == 0
    segs = tiered.tiered_segments()
    local_bytes = sum(s.log_path.stat().st_size for s in segs[-3:])
    assert main(["restore", *src, "--local-bytes", str(local_bytes)]) == 0
    assert deep(capsys, cfg, 0) == []

    # a restored segment that is not the remote one's bytes
    restored = sorted(pdir.glob("*.log"))
    first = restored[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    start = int(first.name[:20])
    problems = deep(capsys, cfg, 1)
    assert [k for k, _ in problems] == ["local_segment_mismatch"] and problems[0][1][0] == start
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))

    # a DeleteRecords bound inside the restored range that the local log does not honour
    rsm = load_rsm(load_config(cfg), -1)
    try:
        rsm.write_log_start_offset(TopicIdPartition(new_id, "restored", 0), start + 3)
    finally:
        rsm.close()
    assert deep(capsys, cfg, 1) == [("local_log_start", [start, start + 2])]
    (tmp_path / "b-logs" / "log-start-offset-checkpoint").write_text(f"0\n1\nrestored 0 {start + 3}\n")
    assert deep(capsys, cfg, 0) == []

    # leader epochs that are not the remote lineage's
    checkpoint = pdir / "leader-epoch-checkpoint"
    good = checkpoint.read_text()
    checkpoint.write_text(f"0\n1\n2 {start}\n")
    assert [k for k, _ in deep(capsys, cfg, 1)] == ["local_epochs"]
    checkpoint.write_text(good)
    assert deep(capsys, cfg, 0) == []
