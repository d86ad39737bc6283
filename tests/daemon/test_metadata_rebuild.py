"""``rlm metadata rebuild``: the metadata store rebuilt from the bucket alone equals the original on
the read path.

A partition written by ``rlm.log.writer`` (every codec, transactions, a leader-epoch change) is
tiered by the real daemon (local storage + file store). Then, as leader changes and an unclean
election leave them, a *duplicate* copy of the first segment and a *diverged* copy of the last
one (an epoch the lineage truncated) are added through the plugin and the store, as a copy task
does. The store is thrown away; ``rlm metadata rebuild`` writes a new one from the bucket; the
read core (``fetcher.RemoteFetcher``) must choose the same segments and return the same records
from both — with descriptors, and from the segments' own files with the descriptors deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fetcher import RemoteFetcher
from rlm.cli import main
from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.errors import RemoteStorageError
from rlm.lineage import checkpoint_bytes
from rlm.log.checkpoints import parse_leader_epoch_checkpoint
from rlm.plugin_setup import load_rlmm, load_rsm
from rlm.types import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rsm_plugins import descriptor
from rsm_plugins.local import LocalRemoteStorageManager
from tests.daemon.rebuild_helpers import read_path
from tests.fetcher._tiered import Tiered, tier, write_mixed_partition

S = RemoteLogSegmentState


# ---- the bucket: a tiered partition plus a duplicate and a diverged copy --------------------------
def _fetch_to(stream: Any, path: Path) -> Path:
    with stream as s:
        path.write_bytes(s.read())
    return path


def recopy(cfg: DaemonConfig, md: RemoteLogSegmentMetadata, epochs: list[tuple[int, int]] | None,
           tmp: Path, node: int) -> RemoteLogSegmentMetadata:
    """Copy ``md``'s bytes again under a new segment id, as another leader's copy task would
    (STARTED, plugin copy, descriptor, FINISHED); ``epochs`` replaces its epoch history."""
    rsm, rlmm = load_rsm(cfg, node), load_rlmm(cfg, node)
    try:
        tp = md.topic_id_partition
        rlmm.on_partition_leadership_changes({tp}, set())
        tmp.mkdir(parents=True, exist_ok=True)
        with rsm.fetch_index(md, IndexType.LEADER_EPOCH) as f:
            history = [(e.epoch, e.start_offset) for e in parse_leader_epoch_checkpoint(f.read())]
        seg_epochs = md.segment_leader_epochs
        if epochs is not None:
            history, seg_epochs = epochs, tuple(e for e in epochs if e[1] >= md.start_offset)
        txn = None if md.txn_index_empty else _fetch_to(rsm.fetch_index(md, IndexType.TRANSACTION), tmp / "t")
        data = LogSegmentData(
            log_segment=_fetch_to(rsm.fetch_log_segment(md, 0), tmp / "log"),
            offset_index=_fetch_to(rsm.fetch_index(md, IndexType.OFFSET), tmp / "i"),
            time_index=_fetch_to(rsm.fetch_index(md, IndexType.TIMESTAMP), tmp / "ti"),
            transaction_index=txn,
            producer_snapshot_index=_fetch_to(rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT), tmp / "s"),
            leader_epoch_index=checkpoint_bytes(history, md.end_offset + 1),
        )
        new = replace(md, remote_log_segment_id=RemoteLogSegmentId.generate_new(tp), broker_id=node,
                      segment_leader_epochs=seg_epochs, state=S.COPY_SEGMENT_STARTED, custom_metadata=None)
        rlmm.add_remote_log_segment_metadata(new)
        custom = rsm.copy_log_segment_data(new, data)
        done = replace(new, custom_metadata=custom)
        assert rsm.write_segment_descriptor(done, descriptor.encode(done))
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            new.remote_log_segment_id, new.event_timestamp_ms + 1, S.COPY_SEGMENT_FINISHED, node, custom))
        return replace(done, state=S.COPY_SEGMENT_FINISHED)
    finally:
        rsm.close()
        rlmm.close()


def finished(cfg: DaemonConfig, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    if not (cfg.work_dir / "metadata").exists():
        return []  # no store was ever written
    rlmm = load_rlmm(cfg, -1, read_only=True)
    try:
        rlmm.on_partition_leadership_changes(set(), {tp})
        return [md for md in rlmm.list_remote_log_segments(tp) if md.state is S.COPY_SEGMENT_FINISHED]
    finally:
        rlmm.close()


class Bucket:
    """The tiered partition, its extra copies, and configs that share its bucket."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.tiered: Tiered = tier(base / "orig")
        self.cfg = self.tiered.config
        self.tp = self.tiered.tip
        segs = finished(self.cfg, self.tp)
        first, last = segs[0], segs[-1]
        self.duplicate = recopy(self.cfg, first, None, base / "dup", node=2)
        # a deposed leader's copy of the last range, under epoch 3: epoch 4 started earlier
        # (at the epoch change), so the lineage truncated epoch 3 and this copy diverges
        history = [(0, 0), (3, last.start_offset)]
        self.diverged = recopy(self.cfg, last, history, base / "div", node=3)
        self.original = finished(self.cfg, self.tp)

    def config(self, name: str) -> tuple[Path, DaemonConfig]:
        """A config file for a new (empty) metadata store over the same bucket."""
        work = self.base / name
        work.mkdir(parents=True, exist_ok=True)
        doc = {"log_dirs": [str(self.tiered.logs)], "work_dir": str(work), "http": {"enabled": False},
               "storage": {"plugin": "local", "config": {"root": str(self.tiered.work / "remote")}}}
        path = work / "rlm.yaml"
        path.write_text(json.dumps(doc))  # YAML is a superset of JSON
        return path, load_config(path)


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    return Bucket(tmp_path_factory.mktemp("rebuild"))


def rebuild(cfg_file: Path, *extra: str, capsys: pytest.CaptureFixture[str] | None = None) -> tuple[int, Any]:
    if capsys is not None:
        capsys.readouterr()  # what the test itself logged
    rc = main(["metadata", "rebuild", "--config", str(cfg_file), "--json", *extra])
    out = json.loads(capsys.readouterr().out) if capsys is not None else None
    return rc, out


@pytest.fixture
def reader() -> Iterator[Any]:
    opened: list[RemoteFetcher] = []

    def open_(cfg: DaemonConfig) -> RemoteFetcher:
        f = RemoteFetcher.from_config(cfg)
        opened.append(f)
        return f

    yield open_
    for f in opened:
        f.close()


def without_time(md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    return replace(md, event_timestamp_ms=0)


# ---- tests -----------------------------------------------------------------------------------------
def test_descriptors_rebuild_the_metadata_exactly(bucket: Bucket, capsys: pytest.CaptureFixture[str],
                                                  reader: Any) -> None:
    assert len(bucket.original) >= 4
    path, cfg = bucket.config("rebuilt")
    rc, dry = rebuild(path, capsys=capsys)
    assert rc == 0
    (part,) = dry["partitions"]
    assert part["written"] == 0 and not finished(cfg, bucket.tp)  # a dry run writes nothing
    skipped = {s["segment_id"]: s["reason"] for s in part["skip"]}
    assert list(skipped) == [bucket.diverged.remote_log_segment_id.id.text]
    assert "off the leader-epoch lineage" in next(iter(skipped.values()))
    kept = {s["segment_id"] for s in part["keep"]}
    assert bucket.duplicate.remote_log_segment_id.id.text in kept
    unread = {s["segment_id"] for s in part["keep"] if not s["read"]}
    assert len(unread) == 1 and unread <= {bucket.duplicate.remote_log_segment_id.id.text,
                                           bucket.original[0].remote_log_segment_id.id.text}
    assert {s["source"] for s in part["keep"]} == {"descriptor"}

    rc, done = rebuild(path, "--execute", capsys=capsys)
    assert rc == 0 and done["partitions"][0]["written"] == len(kept)
    rebuilt = {md.remote_log_segment_id: md for md in finished(cfg, bucket.tp)}
    want = {md.remote_log_segment_id: md for md in bucket.original
            if md.remote_log_segment_id != bucket.diverged.remote_log_segment_id}
    assert {k: without_time(v) for k, v in rebuilt.items()} == {k: without_time(v) for k, v in want.items()}
    assert read_path(reader(cfg), "mixed") == read_path(reader(bucket.cfg), "mixed")

    rc, again = rebuild(path, "--execute", capsys=capsys)  # idempotent
    assert rc == 0 and again["partitions"][0]["written"] == 0
    assert again["partitions"][0]["already_present"] == len(kept)
    assert {md.remote_log_segment_id for md in finished(cfg, bucket.tp)} == set(rebuilt)


def test_segments_without_descriptors_rebuild_from_their_files(bucket: Bucket, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               reader: Any) -> None:
    remote = tmp_path / "remote"
    shutil.copytree(bucket.tiered.work / "remote", remote)
    gone = list(remote.rglob("*.rlm_descriptor"))
    assert len(gone) == len(bucket.original)
    for p in gone:
        p.unlink()
    path, cfg = bucket.config("from-files")
    doc = json.loads(path.read_text())
    doc["storage"]["config"]["root"] = str(remote)
    path.write_text(json.dumps(doc))
    cfg = load_config(path)
    rc, out = rebuild(path, "--execute", capsys=capsys)
    assert rc == 0
    assert {s["source"] for s in out["partitions"][0]["keep"]} == {"files"}
    rebuilt = {md.remote_log_segment_id: md for md in finished(cfg, bucket.tp)}
    for md in bucket.original:
        if md.remote_log_segment_id == bucket.diverged.remote_log_segment_id:
            assert md.remote_log_segment_id not in rebuilt
            continue
        got = rebuilt[md.remote_log_segment_id]
        # what the files cannot say: the writer, the event time, the plugin's custom metadata
        assert replace(got, broker_id=md.broker_id, event_timestamp_ms=md.event_timestamp_ms,
                       custom_metadata=md.custom_metadata) == md
    assert read_path(reader(cfg), "mixed") == read_path(reader(bucket.cfg), "mixed")


def test_refuses_a_store_that_holds_other_segments(bucket: Bucket,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path, cfg = bucket.config("busy")
    rlmm = load_rlmm(cfg, 1)
    try:
        tp = bucket.tp
        rlmm.on_partition_leadership_changes({tp}, set())
        stranger = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp), start_offset=0, end_offset=5, max_timestamp_ms=1,
            broker_id=1, event_timestamp_ms=1, segment_size_in_bytes=10, segment_leader_epochs=((0, 0),))
        rlmm.add_remote_log_segment_metadata(stranger)
    finally:
        rlmm.close()
    rc, out = rebuild(path, "--execute", capsys=capsys)
    assert rc == 1
    part = out["partitions"][0]
    assert part["written"] == 0 and "already holds segment" in part["refused"]
    rlmm = load_rlmm(cfg, -1, read_only=True)
    try:
        rlmm.on_partition_leadership_changes(set(), {bucket.tp})
        assert [md.remote_log_segment_id for md in rlmm.list_remote_log_segments(bucket.tp)] == [
            stranger.remote_log_segment_id]
    finally:
        rlmm.close()


@pytest.mark.parametrize("step", ["rebuild_after_started", "rebuild_after_finished"])
def test_kill_9_mid_rebuild_then_rerun_duplicates_nothing(bucket: Bucket, step: str, reader: Any,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, cfg = bucket.config(f"crash-{step}")
    env = {**os.environ, "RLM_TEST_CRASH_AT": step}
    proc = subprocess.run([sys.executable, "-m", "rlm.cli", "metadata", "rebuild", "--config", str(path),
                           "--execute"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert len(finished(cfg, bucket.tp)) == (1 if step == "rebuild_after_finished" else 0)
    rc, out = rebuild(path, "--execute", capsys=capsys)
    assert rc == 0
    part = out["partitions"][0]
    assert part["written"] + part["already_present"] == len(part["keep"])
    ids = [md.remote_log_segment_id for md in finished(cfg, bucket.tp)]
    assert len(ids) == len(set(ids)) == len(part["keep"])
    assert read_path(reader(cfg), "mixed") == read_path(reader(bucket.cfg), "mixed")


class FailingDescriptorRSM(LocalRemoteStorageManager):
    """Local storage whose first descriptor write fails (class-level: the daemon builds its own)."""

    failures = 1

    def write_segment_descriptor(self, metadata: RemoteLogSegmentMetadata, data: bytes) -> bool:
        if FailingDescriptorRSM.failures > 0:
            FailingDescriptorRSM.failures -= 1
            raise RemoteStorageError("injected: descriptor write failed", retriable=True)
        return super().write_segment_descriptor(metadata, data)


def test_a_failed_descriptor_write_undoes_the_copy(tmp_path: Path) -> None:
    """No FINISHED segment without its descriptor: the copy is undone and retried."""
    logs = tmp_path / "logs"
    tp, _ = write_mixed_partition(logs, batches=60)
    remote = tmp_path / "remote"
    cfg = load_config(None, log_dirs=[str(logs)], work_dir=str(tmp_path / "work"), http={"enabled": False},
                      topic_defaults={"remote.storage.enable": True, "retention.ms": -1},
                      storage={"plugin": f"{__name__}:FailingDescriptorRSM", "config": {"root": str(remote)}})
    d = Daemon(cfg, once=True).start()
    assert d.run_once() == 1  # the partition's task failed on the first segment
    d.stop()
    assert not finished(cfg, tp)
    assert not list(remote.glob(f"{tp.topic}-0-*/*.log")), "the undone copy left its .log"
    d = Daemon(cfg, once=True).start()
    assert d.run_once() == 0
    d.stop()
    segs = finished(cfg, tp)
    assert segs
    rsm = load_rsm(cfg, 1)
    try:
        for md in segs:
            data = rsm.read_segment_descriptor(md)
            assert data is not None and descriptor.decode(data, "t", md.remote_log_segment_id) == replace(
                md, event_timestamp_ms=descriptor.decode(data, "t").event_timestamp_ms)
    finally:
        rsm.close()


def test_a_corrupt_descriptor_falls_back_to_the_files(bucket: Bucket, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    remote = tmp_path / "remote"
    shutil.copytree(bucket.tiered.work / "remote", remote)
    md = bucket.original[1]
    (bad,) = remote.rglob(f"*-{md.remote_log_segment_id.id.text}.rlm_descriptor")
    bad.write_bytes(b'{"version": 1, "topic": ')
    path, _ = bucket.config("corrupt")
    doc = json.loads(path.read_text())
    doc["storage"]["config"]["root"] = str(remote)
    path.write_text(json.dumps(doc))
    rc, out = rebuild(path, capsys=capsys)
    assert rc == 0
    sources = {s["segment_id"]: s["source"] for s in out["partitions"][0]["keep"]}
    assert sources.pop(md.remote_log_segment_id.id.text).startswith("files (descriptor unusable: ")
    assert set(sources.values()) == {"descriptor"}
