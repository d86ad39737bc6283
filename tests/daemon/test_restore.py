"""``rlm restore`` without a broker: the files it writes into a partition directory are the very
bytes the source broker had (segments, indexes, transaction index), a kill -9 part way and a rerun
end with the same directory, and a directory that already holds records is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.log.checkpoints import encode_partition_metadata, read_leader_epoch_checkpoint
from rlm.types import KafkaUuid
from tests.fetcher._tiered import Tiered, tier


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Tiered:
    t = tier(tmp_path_factory.mktemp("restore"))
    (t.work / "rlm.yaml").write_text(json.dumps({
        "log_dirs": [str(t.logs)], "work_dir": str(t.work), "http": {"enabled": False}}))
    return t


def new_broker_dir(base: Path, topic: str, epoch: int = 4) -> tuple[Path, KafkaUuid]:
    """What a new cluster's broker leaves for a new, empty partition (then stopped), led last with
    leader epoch ``epoch`` (the source's highest is 4: restarts raised the new one that far)."""
    pdir = base / f"{topic}-0"
    pdir.mkdir(parents=True)
    new_id = KafkaUuid.random()
    (pdir / "partition.metadata").write_bytes(encode_partition_metadata(new_id))
    for suffix in (".log", ".index", ".timeindex"):
        (pdir / f"{0:020d}{suffix}").write_bytes(b"")
    (pdir / "leader-epoch-checkpoint").write_bytes(f"0\n1\n{epoch} 0\n".encode())
    return pdir, new_id


def restore_args(t: Tiered, log_dir: Path, local_bytes: int, to_topic: str | None = None) -> list[str]:
    return ["restore", "--config", str(t.work / "rlm.yaml"), "--topic", t.tip.topic,
            "--to-topic", to_topic or t.tip.topic, "--log-dir", str(log_dir),
            "--local-bytes", str(local_bytes), "--execute", "--json"]


def test_restored_files_are_the_source_brokers_bytes_even_after_kill_9(
        tiered: Tiered, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    segs = tiered.tiered_segments()
    local_bytes = sum(s.log_path.stat().st_size for s in segs[-3:])
    pdir, new_id = new_broker_dir(tmp_path / "b", "side-by-side")  # --to-topic: another name
    env = {**os.environ, "RLM_TEST_CRASH_AT": "restore_after_segment"}
    args = restore_args(tiered, tmp_path / "b", local_bytes, "side-by-side")
    proc = subprocess.run([sys.executable, "-m", "rlm.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert len(list(pdir.glob("*.log"))) == 1  # the first restored segment is in place, the rest not
    capsys.readouterr()
    assert main(restore_args(tiered, tmp_path / "b", local_bytes, "side-by-side")) == 0
    (part,) = json.loads(capsys.readouterr().out)["partitions"]
    assert part["new_topic_id"] == new_id.text
    restored = segs[-3:]
    assert [s["start_offset"] for s in part["segments"]] == [s.base_offset for s in restored]
    assert part["first_offset"] == restored[0].base_offset
    names = sorted(p.name for p in pdir.iterdir())
    for seg in restored:
        for src in (seg.log_path, seg.index_path, seg.time_index_path, seg.txn_index_path):
            if src.exists() and src.stat().st_size > 0:
                assert (pdir / src.name).read_bytes() == src.read_bytes(), src.name
    nxt = part["next_offset"]
    assert f"{nxt:020d}.snapshot" in names and f"{0:020d}.log" not in names
    source_snapshot = tiered.pdir.snapshot_path(nxt)
    if source_snapshot.exists():
        assert (pdir / source_snapshot.name).read_bytes() == source_snapshot.read_bytes()
    checkpoint = read_leader_epoch_checkpoint(pdir / "leader-epoch-checkpoint")
    epochs = [(e.epoch, e.start_offset) for e in checkpoint]
    assert epochs == [(4, restored[0].base_offset)]  # the epoch change lies before the restored range
    assert (pdir / "partition.metadata").read_bytes() == encode_partition_metadata(new_id)
    assert not list(pdir.glob("*.tmp-restore"))


def test_a_directory_with_records_is_refused(tiered: Tiered, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    pdir, _ = new_broker_dir(tmp_path / "b", tiered.tip.topic)
    (pdir / f"{0:020d}.log").write_bytes(b"\0" * 100)
    before = sorted(p.name for p in pdir.iterdir())
    capsys.readouterr()
    assert main(restore_args(tiered, tmp_path / "b", 0)) == 1
    (part,) = json.loads(capsys.readouterr().out)["partitions"]
    assert "refused" in part["skipped"] and part["written"] == []
    assert sorted(p.name for p in pdir.iterdir()) == before


def test_local_bytes_defaults_to_the_topics_local_retention(tiered: Tiered, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    segs = tiered.tiered_segments()
    two = sum(s.log_path.stat().st_size for s in segs[-2:])
    cfg = tiered.work / "rlm-local-retention.yaml"
    cfg.write_text(json.dumps({
        "log_dirs": [str(tiered.logs)], "work_dir": str(tiered.work), "http": {"enabled": False},
        "topics": [{"pattern": tiered.tip.topic, "local.retention.bytes": two}]}))
    new_broker_dir(tmp_path / "b", tiered.tip.topic)
    capsys.readouterr()
    assert main(["restore", "--config", str(cfg), "--topic", tiered.tip.topic, "--log-dir",
                 str(tmp_path / "b"), "--json"]) == 0  # no --local-bytes; dry run
    (part,) = json.loads(capsys.readouterr().out)["partitions"]
    assert [s["start_offset"] for s in part["segments"]] == [s.base_offset for s in segs[-2:]]


def test_a_new_leader_epoch_below_the_restored_ones_is_refused(tiered: Tiered, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The broker would drop restored epochs above its own (LeaderEpochFileCache.assign), and the
    sidecar would then take new segments for a deposed leader's tail."""
    pdir, _ = new_broker_dir(tmp_path / "b", tiered.tip.topic, epoch=2)
    before = sorted(p.name for p in pdir.iterdir())
    capsys.readouterr()
    assert main(restore_args(tiered, tmp_path / "b", 0)) == 1
    (part,) = json.loads(capsys.readouterr().out)["partitions"]
    assert "below the restored epoch 4" in part["leader_epoch_problem"] and part["written"] == []
    assert sorted(p.name for p in pdir.iterdir()) == before
    assert main([*restore_args(tiered, tmp_path / "b", 0), "--ignore-leader-epochs"]) == 0
