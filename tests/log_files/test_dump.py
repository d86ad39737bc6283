"""``rlm dump``: one JSON object per record/entry for every file type; exit 1 with one stderr
line ``rlm: error: <path>: <byte position>: <what>`` on a corrupt or truncated file."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.exit_codes import ExitCode
from rlm.log import checkpoints as ckpt
from rlm.log.offset_index import read_offset_index
from rlm.log.partition import PartitionDir
from rlm.log.producer_snapshot import read_snapshot
from rlm.log.records import iter_batches, iter_records
from rlm.log.time_index import read_time_index
from rlm.log.txn_index import read_txn_index
from rlm.log.writer import write_log_dir_files
from rlm.types import TopicPartition
from tests.log_files._data import write_partition

ERROR_LINE = re.compile(r"^rlm: error: (?P<path>\S+): (?P<pos>\d+): (?P<what>.+)$")


@pytest.fixture(scope="module")
def pdir(tmp_path_factory: pytest.TempPathFactory) -> PartitionDir:
    root = tmp_path_factory.mktemp("dump")
    exp = write_partition(root / "d-0", batches=120, segment_bytes=16 * 1024, epoch_change_at=60)
    write_log_dir_files(root, [(TopicPartition("d", 0), exp.log_end_offset)],
                        meta=ckpt.MetaProperties(1, "MkU3OEVBNTcwNTJENDM2Qk", 3))
    return PartitionDir(root / "d-0")


def _json(capsys: pytest.CaptureFixture[str], path: Path) -> list[dict[str, object]]:
    assert main(["dump", "--json", str(path)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_log(pdir: PartitionDir, capsys: pytest.CaptureFixture[str]) -> None:
    seg = next(s for s in pdir.segments if s.txn_index_path.exists())
    out = _json(capsys, seg.log_path)
    want = list(iter_records(seg.log_path))
    assert len(out) == len(want) > 10
    for obj, (h, r) in zip(out, want, strict=True):
        assert obj["offset"] == r.offset and obj["base_offset"] == h.base_offset
        assert obj["partition_leader_epoch"] == h.partition_leader_epoch
        assert obj["producer_id"] == h.producer_id and obj["producer_epoch"] == h.producer_epoch
        assert obj["base_sequence"] == h.base_sequence and obj["is_transactional"] == h.is_transactional
        assert obj["compression"] == h.compression.name.lower()
        if h.is_control:
            assert obj["control"] == {"type": r.type.name, "coordinator_epoch": 1}  # type: ignore[union-attr]
            continue
        assert obj["timestamp"] == r.timestamp and obj["timestamp_type"] == "CreateTime"
        assert obj["key"] == (None if r.key is None else base64.b64encode(r.key).decode())  # type: ignore[union-attr]
        assert obj["value"] == (None if r.value is None else base64.b64encode(r.value).decode())  # type: ignore[union-attr]
        assert obj["headers"] == [[k, None if v is None else base64.b64encode(v).decode()]
                                  for k, v in r.headers]  # type: ignore[union-attr]
    assert {o["compression"] for o in out} >= {"none", "gzip", "snappy", "lz4", "zstd"} - {"none"}
    assert {o["control"]["type"] for o in out if "control" in o} == {"ABORT", "COMMIT"}  # type: ignore[index]


def test_indexes_snapshots_and_checkpoints(pdir: PartitionDir, capsys: pytest.CaptureFixture[str]) -> None:
    seg = next(s for s in pdir.segments if s.txn_index_path.exists())
    assert _json(capsys, seg.index_path) == [{"offset": e.offset, "position": e.position}
                                             for e in read_offset_index(seg.index_path).entries()]
    assert _json(capsys, seg.time_index_path) == [{"timestamp": t.timestamp, "offset": t.offset}
                                                  for t in read_time_index(seg.time_index_path).entries()]
    assert _json(capsys, seg.txn_index_path) == [
        {"producer_id": a.producer_id, "first_offset": a.first_offset, "last_offset": a.last_offset,
         "last_stable_offset": a.last_stable_offset} for a in read_txn_index(seg.txn_index_path)]
    snap = pdir.snapshot_path(pdir.snapshot_offsets[-1])
    out = _json(capsys, snap)
    assert sorted(o["producer_id"] for o in out) == sorted(e.producer_id for e in read_snapshot(snap))
    assert set(out[0]) == {"producer_id", "producer_epoch", "last_sequence", "last_offset", "offset_delta",
                           "timestamp", "coordinator_epoch", "current_txn_first_offset"}
    second = pdir.leader_epochs()[1].start_offset
    assert _json(capsys, pdir.path / "leader-epoch-checkpoint") == [{"epoch": 0, "start_offset": 0},
                                                                    {"epoch": 3, "start_offset": second}]
    assert _json(capsys, pdir.path / "partition.metadata") == [{"version": 0, "topic_id": pdir.topic_id.text}]
    root = pdir.path.parent
    assert _json(capsys, root / "replication-offset-checkpoint") == [
        {"topic": "d", "partition": 0, "offset": pdir.log_end_offset()}]
    assert _json(capsys, root / "meta.properties")[0]["node.id"] == "3"
    assert _json(capsys, root / ".kafka_cleanshutdown") == [{"broker_epoch": -1}]
    assert main(["dump", "--json", str(pdir.path)]) == 0
    assert len(capsys.readouterr().out.splitlines()) > 500
    assert main(["dump", str(seg.index_path), str(seg.log_path)]) == 0
    text = capsys.readouterr().out
    assert f"Dumping {seg.index_path}" in text and "isvalid: true" in text and "| offset:" in text


def _corrupt_cases(pdir: PartitionDir, tmp: Path) -> dict[str, tuple[Path, str]]:
    d = tmp / "d-0"
    shutil.copytree(pdir.path, d)
    seg = PartitionDir(d).segments[0]
    log = bytearray(seg.log_path.read_bytes())
    third = list(iter_batches(seg.log_path))[2].position
    log[third + 30] ^= 0x10  # inside the CRC-covered part of the third batch
    (d / "flip.log").write_bytes(bytes(log))
    (d / "00000000000000000000.short.log").write_bytes(seg.log_path.read_bytes()[:-7])
    seg.index_path.write_bytes(seg.index_path.read_bytes()[:-3])
    snap = PartitionDir(d).snapshot_path(PartitionDir(d).snapshot_offsets[0])
    data = bytearray(snap.read_bytes())
    data[-1] ^= 1
    snap.write_bytes(bytes(data))
    (d / "leader-epoch-checkpoint").write_bytes(b"0\n2\n0 0\n")
    return {"crc": (d / "flip.log", f"crc|{third}"),
            "truncated log": (d / "00000000000000000000.short.log", "truncated"),
            "index": (seg.index_path, "multiple of 8"), "snapshot": (snap, "CRC"),
            "checkpoint": (d / "leader-epoch-checkpoint", "expected 2 entries"),
            "missing": (d / "00000000000000999999.index", "does not exist")}


def test_corrupt_files_exit_1_with_one_line(pdir: PartitionDir, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    for name, (path, what) in _corrupt_cases(pdir, tmp_path).items():
        assert main(["dump", "--json", str(path)]) == ExitCode.FAILURE, name
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1, (name, err)
        m = ERROR_LINE.match(err[0])
        what, _, pos = what.partition("|")
        assert m and m["path"] == str(path) and what in m["what"], (name, err)
        assert not pos or m["pos"] == pos, (name, err)


def test_cli_process_has_no_traceback(pdir: PartitionDir, tmp_path: Path) -> None:
    path, what = _corrupt_cases(pdir, tmp_path)["crc"]
    res = subprocess.run([sys.executable, "-m", "rlm.cli", "dump", "--json", str(path)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == ExitCode.FAILURE
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), res.stderr
    assert ERROR_LINE.match(lines[0])["pos"] == what.partition("|")[2] != "0"  # type: ignore[index]
