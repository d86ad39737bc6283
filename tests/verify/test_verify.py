"""``rlm verify`` against a standalone tiered log dir (local storage + file metadata store), each
damage made by hand on a copy of one tiered work dir, then against real S3 for the listing."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import rsm_plugins
from rlm.cli import main
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.file import FileRemoteLogMetadataManager
from rsm_plugins.api import RemoteStorageManager, StoredObject
from rsm_plugins.local import LocalRemoteStorageManager
from tests.daemon.helpers import finished, s3_storage
from tests.daemon.test_standalone import cfg_for, run_once, write_partition
from tests.services.s3 import S3Endpoint

S = RemoteLogSegmentState
DAY_MS = 86_400_000


def base_config(logs: Path, work: Path, **extra: Any) -> dict[str, Any]:
    return {"log_dirs": [str(logs)], "work_dir": str(work), "http": {"enabled": False},
            "topic_defaults": {"remote.storage.enable": True, "retention.ms": -1}, **extra}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TopicIdPartition]:
    """One partition tiered once: 4+ finished segments in <root>/work (shared, never modified)."""
    root = tmp_path_factory.mktemp("tiered")
    tip = write_partition(root / "logs", "ev", 0, 150)
    run_once(cfg_for(root / "logs", root / "work"))
    return root, tip


class Site:
    """A private copy of the tiered work dir with its config file, and helpers to damage it."""

    def __init__(self, tiered: tuple[Path, TopicIdPartition], tmp: Path) -> None:
        src, self.tip = tiered
        self.logs, self.work = src / "logs", tmp / "work"
        shutil.copytree(src / "work", self.work)
        self.config = tmp / "rlm.yaml"
        self.config.write_text(yaml.safe_dump(base_config(self.logs, self.work)))
        self.pdir = self.work / "remote" / f"ev-0-{self.tip.topic_id.text}"

    def segments(self) -> list[RemoteLogSegmentMetadata]:
        m = FileRemoteLogMetadataManager.open(self.work / "metadata")
        try:
            m.on_partition_leadership_changes({self.tip}, set())
            return finished(m, self.tip)
        finally:
            m.close()

    def file(self, md: RemoteLogSegmentMetadata, suffix: str) -> Path:
        return self.pdir / f"{md.start_offset:020d}-{md.remote_log_segment_id.id.text}{suffix}"

    def add(self, md: RemoteLogSegmentMetadata, *updates: tuple[S, bytes | None]) -> None:
        m = FileRemoteLogMetadataManager.open(self.work / "metadata")
        try:
            m.add_remote_log_segment_metadata(md)
            for state, custom in updates:
                m.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, md.event_timestamp_ms, state, 1, custom))
        finally:
            m.close()

    def update(self, md: RemoteLogSegmentMetadata, *states: S) -> None:
        m = FileRemoteLogMetadataManager.open(self.work / "metadata")
        try:
            for state in states:
                m.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, int(time.time() * 1000), state, 1))
        finally:
            m.close()

    def verify(self, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        rc = main(["verify", "--config", str(self.config), "--json", *flags])
        return rc, json.loads(capsys.readouterr().out)


def problems(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for part in out["partitions"] for p in part["problems"]]


def kinds(out: dict[str, Any]) -> set[str]:
    return {p["kind"] for p in problems(out)}


def new_segment(
    tip: TopicIdPartition, like: RemoteLogSegmentMetadata, **changes: Any
) -> RemoteLogSegmentMetadata:
    fields: dict[str, Any] = {
        "remote_log_segment_id": RemoteLogSegmentId(tip, KafkaUuid.random()),
        "start_offset": like.start_offset, "end_offset": like.end_offset,
        "max_timestamp_ms": like.max_timestamp_ms, "broker_id": 1,
        "event_timestamp_ms": int(time.time() * 1000),
        "segment_size_in_bytes": like.segment_size_in_bytes,
        "segment_leader_epochs": like.segment_leader_epochs, "txn_index_empty": like.txn_index_empty}
    fields.update(changes)
    return RemoteLogSegmentMetadata(**fields)


def copy_files(site: Site, src: RemoteLogSegmentMetadata, dst: RemoteLogSegmentMetadata) -> list[Path]:
    out = []
    for f in site.pdir.glob(f"*-{src.remote_log_segment_id.id.text}.*"):
        target = site.file(dst, "." + f.name.split(".", 1)[1])
        shutil.copyfile(f, target)
        out.append(target)
    return out


@pytest.fixture
def site(tiered: tuple[Path, TopicIdPartition], tmp_path: Path) -> Site:
    return Site(tiered, tmp_path)


def test_clean_store_exits_0_and_text_summary(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = site.verify(capsys, "--deep")
    assert rc == 0 and out["ok"] is True and out["problems"] == 0
    [part] = out["partitions"]
    assert part["partition"] == "ev-0" and part["segments"] >= 4
    assert part["objects"] == len(list(site.pdir.iterdir()))
    assert main(["verify", "--config", str(site.config)]) == 0
    text = capsys.readouterr().out
    assert "ev-0:" in text and "1 partitions checked, 0 problems" in text


@pytest.mark.parametrize("damage", ["delete", "truncate", "flip"])
def test_damaged_object_is_named(site: Site, capsys: pytest.CaptureFixture[str], damage: str) -> None:
    md = site.segments()[1]
    suffix = {"delete": ".index", "truncate": ".log", "flip": ".timeindex"}[damage]
    f = site.file(md, suffix)
    if damage == "delete":
        f.unlink()
    elif damage == "truncate":
        os.truncate(f, f.stat().st_size - 100)
    else:
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0x01
        f.write_bytes(bytes(data))
    rc, out = site.verify(capsys)
    assert rc == 1 and out["ok"] is False
    [p] = problems(out)
    assert p["segment_id"] == md.remote_log_segment_id.id.text
    assert p["offsets"] == [md.start_offset, md.end_offset]
    assert suffix in p["message"]
    want = {"delete": {"missing_object"}, "truncate": {"corrupt_object", "size_mismatch"},
            "flip": {"corrupt_object", "checksum_mismatch"}}[damage]
    assert p["kind"] in want


def test_orphan_object(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    md = site.segments()[0]
    ghost = new_segment(site.tip, md)
    made = copy_files(site, md, ghost)
    rc, out = site.verify(capsys)
    assert rc == 1 and kinds(out) == {"orphan_object"}
    assert {p["key"] for p in problems(out)} == {str(f) for f in made}
    assert all(p["segment_id"] == ghost.remote_log_segment_id.id.text for p in problems(out))


def test_metadata_gap(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    md = site.segments()[2]
    site.update(md, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)
    rc, out = site.verify(capsys)
    assert rc == 1
    gaps = [p for p in problems(out) if p["kind"] == "offset_gap"]
    assert [g["offsets"] for g in gaps] == [[md.start_offset, md.end_offset]]
    # its files are still there and no metadata names them any more
    assert {p["segment_id"] for p in problems(out) if p["kind"] == "orphan_object"} == {
        md.remote_log_segment_id.id.text}


def test_stale_copy_found_and_cleaned_by_daemon(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """A crash mid-copy: STARTED metadata and the index files already uploaded, no .log."""
    last = site.segments()[-1]
    crashed = new_segment(site.tip, last, start_offset=last.end_offset + 1, end_offset=last.end_offset + 50,
                          event_timestamp_ms=int(time.time() * 1000) - DAY_MS)
    site.add(crashed)
    for suffix in (".index", ".timeindex"):
        shutil.copyfile(site.file(last, suffix), site.file(crashed, suffix))
    rc, out = site.verify(capsys)
    assert rc == 1
    [p] = problems(out)
    assert p["kind"] == "stale_copy" and p["segment_id"] == crashed.remote_log_segment_id.id.text
    assert p["offsets"] == [crashed.start_offset, crashed.end_offset]
    # the daemon's stale-copy cleanup removes the leftover index files with the metadata
    run_once(cfg_for(site.logs, site.work))
    assert not list(site.pdir.glob(f"*-{crashed.remote_log_segment_id.id.text}.*"))
    rc, out = site.verify(capsys)
    assert (rc, out["problems"]) == (0, 0)


def test_deep_catches_segment_that_ends_early(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    last = site.segments()[-1]
    longer = new_segment(site.tip, last, end_offset=last.end_offset + 3)
    site.add(longer, (S.COPY_SEGMENT_FINISHED, last.custom_metadata))
    copy_files(site, last, longer)
    rc, out = site.verify(capsys)
    assert (rc, out["problems"]) == (0, 0)  # files and checksums are all right
    rc, out = site.verify(capsys, "--deep")
    assert rc == 1
    [p] = problems(out)
    assert p["kind"] == "incomplete_segment" and p["segment_id"] == longer.remote_log_segment_id.id.text
    assert str(last.end_offset + 3) in p["message"]


def test_repair_dry_run_then_execute(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    segs = site.segments()
    old, fresh = new_segment(site.tip, segs[0]), new_segment(site.tip, segs[1])
    old_files, fresh_files = copy_files(site, segs[0], old), copy_files(site, segs[1], fresh)
    past = time.time() - 2 * 86_400
    for f in old_files:
        os.utime(f, (past, past))
    before = {f.name: f.read_bytes() for f in site.pdir.iterdir()}
    rc, out = site.verify(capsys, "--repair")
    assert rc == 1 and kinds(out) == {"orphan_object"}
    [rep] = out["repairs"]
    assert rep["segment_id"] == old.remote_log_segment_id.id.text and rep["deleted"] is False
    assert {f.name: f.read_bytes() for f in site.pdir.iterdir()} == before
    rc, out = site.verify(capsys, "--repair", "--execute")
    assert [r["deleted"] for r in out["repairs"]] == [True]
    after = {f.name for f in site.pdir.iterdir()}
    assert after == set(before) - {f.name for f in old_files}
    assert all(f.exists() for f in fresh_files)
    rc, out = site.verify(capsys)
    assert {p["segment_id"] for p in problems(out)} == {fresh.remote_log_segment_id.id.text}


@pytest.mark.slow
def test_s3_listing_finds_orphan(seaweedfs: S3Endpoint, seaweedfs_bucket: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    tip = write_partition(logs, "s3v", 0, 80)
    storage = s3_storage(seaweedfs, seaweedfs_bucket)
    run_once(cfg_for(logs, tmp_path / "work", storage=storage))
    config = tmp_path / "rlm.yaml"
    config.write_text(yaml.safe_dump(base_config(logs, tmp_path / "work", storage=storage)))
    capsys.readouterr()
    assert main(["verify", "--config", str(config), "--json", "--deep"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["partitions"][0]["objects"] >= 10
    key = f"t/s3v-{tip.topic_id.text}/0/{0:020d}-{KafkaUuid.random().text}.index"
    seaweedfs.boto3_client().put_object(Bucket=seaweedfs_bucket, Key=key, Body=b"x" * 10)
    assert main(["verify", "--config", str(config), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [(p["kind"], p["key"]) for p in problems(out)] == [("orphan_object", key)]


class UnlistedLocal(LocalRemoteStorageManager):
    """A plugin without a listing (the base class's default)."""

    def list_segment_objects(self, tp: TopicIdPartition) -> list[StoredObject] | None:
        return RemoteStorageManager.list_segment_objects(self, tp)


def test_plugin_that_cannot_list(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    storage = {"plugin": f"{__name__}:UnlistedLocal", "config": {"root": str(site.work / "remote")}}
    site.config.write_text(yaml.safe_dump(base_config(site.logs, site.work, storage=storage)))
    copy_files(site, site.segments()[0], new_segment(site.tip, site.segments()[0]))  # not seen
    rc, out = site.verify(capsys)
    assert (rc, out["problems"], out["partitions"][0]["objects"]) == (0, 0, None)
    assert main(["verify", "--config", str(site.config)]) == 0
    assert "orphans not checked" in capsys.readouterr().out


def test_fsspec_listing_matches_local(site: Site) -> None:
    """The fsspec plugin lists the same Kafka-layout directory as the local plugin does."""
    local = rsm_plugins.load("local", {"root": str(site.work / "remote")})
    fs = rsm_plugins.load("fsspec", {"url": f"file://{site.work / 'remote'}"})
    try:
        def view(rsm: RemoteStorageManager) -> set[tuple[Any, ...]]:
            listing = rsm.list_segment_objects(site.tip)
            assert listing is not None
            return {(o.segment_id, o.start_offset, o.file_type, o.size) for o in listing}

        want = view(local)
        assert len(want) == len(list(site.pdir.iterdir())) and None not in {w[0] for w in want}
        assert view(fs) == want
        assert fs.list_segment_objects(TopicIdPartition(KafkaUuid.random(), "none", 0)) == []
    finally:
        local.close()
        fs.close()


def test_temp_file_reported_not_repaired_and_recent_object_not_judged(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    md = site.segments()[0]
    ghost = new_segment(site.tip, md)
    tmp = site.pdir / (site.file(ghost, ".log").name + ".0123456789ab.tmp")
    tmp.write_bytes(b"partial")
    future = site.file(new_segment(site.tip, md), ".index")  # as if copied after the metadata read
    future.write_bytes(b"new")
    later = time.time() + 3600
    os.utime(future, (later, later))
    past = time.time() - 2 * 86_400
    os.utime(tmp, (past, past))
    rc, out = site.verify(capsys, "--repair", "--execute")
    assert rc == 1 and [(p["kind"], p["key"], p["segment_id"]) for p in problems(out)] == [
        ("orphan_object", str(tmp), ghost.remote_log_segment_id.id.text)]
    assert out["partitions"][0]["recent_objects"] == 1 and out["repairs"] == []
    assert tmp.exists() and future.exists()


def test_deep_walk_in_small_chunks(site: Site) -> None:
    """Batches split across chunk boundaries are reassembled (a 64 KiB segment fed 1000 bytes at a time)."""
    from rlm.commands.verify_checks import _DeepWalk

    for md in site.segments():
        walk = _DeepWalk(md)
        data = site.file(md, ".log").read_bytes()
        for i in range(0, len(data), 1000):
            walk.feed(data[i:i + 1000])
        assert walk.problem() is None
        short = _DeepWalk(md)
        short.feed(data[:-10])
        assert "bytes end with offset" in (short.problem() or "")
