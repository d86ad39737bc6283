"""``rlm demo``: writes a log dir, tiers it with the embedded defaults, reads a record back from remote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rsm_plugins
from rlm.commands.demo import demo_config
from rlm.log.checkpoints import read_partition_metadata
from rlm.log.partition import PartitionDir
from rlm.types import TopicIdPartition
from rlmm.file import FileRemoteLogMetadataManager
from tests.daemon.helpers import check_segment_against_local, finished

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
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
    lines = res.stdout.splitlines()
    fetched = [ln for ln in lines if ln.startswith("Partition: 0\t")]
    assert [ln.split("\t")[1] for ln in fetched] == ["Offset: 0", "Offset: 1", "Offset: 2"], res.stdout
    assert fetched[0].split("\t")[3] == "Key: o0" and '"order_id": 0' in fetched[0]
    assert re.search(r"\tTimestamp: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\t", fetched[0]), fetched[0]
    copied = re.search(r"copied (\d+) segments, ([\d.]+) MB to ", res.stdout)
    assert copied is not None and int(copied.group(1)) > 0 and float(copied.group(2)) > 0, res.stdout
    assert "user-profiles-0 (compacted: nothing to tier" in res.stdout, res.stdout

    status = subprocess.run(
        [sys.executable, "-m", "rlm.cli", "status", "--work-dir", str(d / "rlm-work"), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    parts = json.loads(status.stdout)["partitions"]
    assert set(parts) == {"orders-0", "orders-1", "payments-0", "clicks-0", "user-profiles-0"}
    assert parts["user-profiles-0"]["remote_end"] < 0, "compacted: no cleaner checkpoint, nothing tiered"
    # the three reads agree with what was tiered: orders has no transactions, offsets 0..remote_end
    tiered = {p: parts[f"orders-{p}"]["remote_end"] + 1 for p in (0, 1)}
    kafka = re.search(r"orders-0 offsets 0\.\.(\d+), polled (\d+) records, first key b'o0'", res.stdout)
    assert kafka is not None, res.stdout
    assert (int(kafka.group(1)), int(kafka.group(2))) == (tiered[0], min(2000, tiered[0]))
    counts = dict(re.findall(r"orders partition (\d): (\d+) rows", res.stdout))
    assert counts == {"0": str(tiered[0]), "1": str(tiered[1])}, res.stdout
    # the configuration it used is left behind and works with the other commands
    assert yaml.safe_load((d / "rlm.yaml").read_text()) == demo_config(d)
    st = subprocess.run([sys.executable, "-m", "rlm.cli", "status", "--config", str(d / "rlm.yaml")],
                        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert st.returncode == 0 and "orders-0" in st.stdout, st.stderr
    assert f"rlm fetch --config {d / 'rlm.yaml'} --topic payments" in res.stdout

    pay = parts["payments-0"]
    assert pay["remote_end"] < pay["lso"] < pay["local_end"], "the open transaction holds the LSO back"

    rsm = rsm_plugins.load("local", {"root": str(d / "remote-storage")})
    rlmm = FileRemoteLogMetadataManager.open(d / "rlm-work" / "metadata")
    try:
        for name in set(parts) - {"user-profiles-0"}:  # compacted: nothing tiered (asserted above)
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


def test_demo_refuses_a_non_empty_dir_and_a_bad_size(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("x")
    for extra in (["--dir", str(tmp_path)], ["--dir", str(tmp_path / "new"), "--size-mb", "0"]):
        res = subprocess.run([sys.executable, "-m", "rlm.cli", "demo", *extra], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 3, res.stderr
        assert res.stderr.startswith("rlm: error: ")
    assert not (tmp_path / "new").exists() and not (tmp_path / "rlm.yaml").exists()
