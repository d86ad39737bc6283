"""``rlm restore --adopt-into``: the old history, under the new topic id, without copying objects.

Without a broker (local plugin, file metadata stores): a mixed partition (codecs, transactions, an
epoch change) is tiered under topic id A; adoption writes its segments into a second, empty store
under a new topic id B (and another topic name, as ``--to-topic`` does). The read core from the
new store answers exactly what it answers from the old one — plan, every record, read_committed;
through the local and the fsspec plugin; and the HTTP API's records —
while no object exists under B; the redirect round-trips and a malformed one is refused; ``rlm
verify`` on the new store finds every segment whole and the local log meeting the remote range (a
hole is a ``local_gap``); a rerun writes nothing, a run killed after a STARTED record finishes on
rerun with every segment once; and deleting an adopted segment (what retention does) deletes the
original objects (Spark over adopted history: ``tests/spark/test_source_adopted.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from fetcher import RemoteFetcher
from fetcher.http.encoders import NDJSON
from fetcher.http.server import HttpApiServer
from rlm.cli import main
from rlm.config import load_config
from rlm.errors import RemoteStorageIntegrityError
from rlm.plugin_setup import load_rlmm, load_rsm
from rlm.types import KafkaUuid, RemoteLogSegmentState, TopicIdPartition
from rsm_plugins import integrity, redirect
from tests.daemon.rebuild_helpers import read_path
from tests.daemon.test_restore import new_broker_dir
from tests.fetcher._tiered import Tiered, tier


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Tiered:
    t = tier(tmp_path_factory.mktemp("adopt"))
    (t.work / "rlm.yaml").write_text(json.dumps({
        "log_dirs": [str(t.logs)], "work_dir": str(t.work), "http": {"enabled": False}}))
    return t


def test_redirect_round_trip_and_refusals() -> None:
    stored = TopicIdPartition(KafkaUuid.random(), "old-name", 7)
    inner = integrity.encode(integrity.SegmentManifest(integrity.LayoutCode.KAFKA, {}, "/x"))
    blob = redirect.encode(stored, inner)
    got = redirect.decode(blob)
    assert got == redirect.Redirect(stored, inner)
    assert redirect.encode(TopicIdPartition(KafkaUuid.random(), "other", 1), blob) == blob  # never nested
    assert integrity.decode(blob) == integrity.decode(inner)  # plugins' checksums read through it
    assert redirect.decode(inner) is None and redirect.decode(None) is None
    with pytest.raises(RemoteStorageIntegrityError):
        redirect.decode(blob[:10])
    with pytest.raises(RemoteStorageIntegrityError):
        redirect.decode(blob[:18] + bytes([3]) + b"../")  # a name leading out of the root


def adopt_target(tmp_path: Path, storage_root: Path, name: str) -> tuple[Path, KafkaUuid, Path]:
    """A new cluster's broker dir for ``name`` and its sidecar configuration (same storage)."""
    pdir, new_id = new_broker_dir(tmp_path / "b-logs", name)
    cfg = tmp_path / "b" / "rlm.yaml"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({
        "log_dirs": [str(tmp_path / "b-logs")], "work_dir": str(tmp_path / "b"), "http": {"enabled": False},
        "storage": {"plugin": "local", "config": {"root": str(storage_root)}}}))
    return cfg, new_id, pdir


@pytest.mark.slow  # a subprocess importing the whole CLI
def test_adoption_killed_part_way_finishes_on_rerun(tiered: Tiered, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    new_cfg, _, _ = adopt_target(tmp_path, tiered.work / "remote", "killed")
    args = ["restore", "--config", str(tiered.work / "rlm.yaml"), "--topic", tiered.tip.topic,
            "--to-topic", "killed", "--log-dir", str(tmp_path / "b-logs"), "--adopt-into", str(new_cfg),
            "--execute", "--json"]
    env = {**os.environ, "RLM_TEST_CRASH_AT": "adopt_after_started"}
    proc = subprocess.run([sys.executable, "-m", "rlm.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    capsys.readouterr()
    assert main(args) == 0
    (done,) = json.loads(capsys.readouterr().out)["adopted"]
    n = len(tiered.tiered_segments())
    assert done["written"] == n and done["already_present"] == 0  # the STARTED one is finished
    cfg = load_config(new_cfg)
    rlmm = load_rlmm(cfg, -1, read_only=True)
    try:
        rlmm.follow_all()
        (tp,) = [tp for tp in rlmm.known_partitions() if tp.topic == "killed"]
        states = [md.state for md in rlmm.list_remote_log_segments(tp)]
    finally:
        rlmm.close()
    assert states == [RemoteLogSegmentState.COPY_SEGMENT_FINISHED] * n  # each segment once


def test_adopted_history_reads_like_the_original_without_a_copy(
        tiered: Tiered, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src_cfg = tiered.work / "rlm.yaml"
    storage_root = tiered.work / "remote"
    before = sorted(p.relative_to(storage_root) for p in storage_root.rglob("*") if p.is_file())
    new_cfg, new_id, pdir = adopt_target(tmp_path, storage_root, "renamed")
    args = ["restore", "--config", str(src_cfg), "--topic", tiered.tip.topic, "--to-topic", "renamed",
            "--log-dir", str(tmp_path / "b-logs"), "--adopt-into", str(new_cfg), "--json"]
    capsys.readouterr()
    assert main(args) == 0  # dry run: nothing written
    (plan,) = json.loads(capsys.readouterr().out)["adopted"]
    assert plan["written"] == 0 and plan["topic_id"] == new_id.text
    assert main([*args, "--execute"]) == 0
    (done,) = json.loads(capsys.readouterr().out)["adopted"]
    n = len(tiered.tiered_segments())
    assert done["segments"] == done["written"] == n and done["first_offset"] == 0

    old = RemoteFetcher.from_config(tiered.config)
    new = RemoteFetcher.from_config(load_config(new_cfg))
    try:
        assert [tp.topic_id for tp in new.topics()["renamed"]] == [new_id]
        want, got = read_path(old, tiered.tip.topic), read_path(new, "renamed")
        strip = lambda plan: (  # noqa: E731 - segment ids carry the topic id: compare the uuids
            [(sid.id, a, b) for sid, a, b in plan[0]], *plan[1:])
        assert strip(got[0]) == strip(want[0]) and got[1] == want[1]
        assert len(want[1][0]) > 100 and want[1][2], "records, and an aborted transaction"
    finally:
        old.close()
        new.close()
    # the fsspec plugin follows the redirect too (same Kafka layout, read through file://)
    fs_cfg = load_config(new_cfg).model_copy(update={"storage": load_config(None, storage={
        "plugin": "fsspec", "config": {"url": f"file://{storage_root}"}}).storage})
    via_fsspec = RemoteFetcher.from_config(fs_cfg)
    try:
        assert via_fsspec.rsm.plugin_name == "fsspec"
        assert read_path(via_fsspec, "renamed")[1] == want[1]
    finally:
        via_fsspec.close()
    # the HTTP API: the same records under the new name and id as under the old ones
    def http_rows(cfg: Any, topic: str) -> list[Any]:
        server = HttpApiServer.from_config(cfg.model_copy(update={"read": cfg.read.model_copy(
            update={"http_port": 0})})).start()
        try:
            r = requests.get(f"http://127.0.0.1:{server.port}/v1/topics/{topic}/partitions/0/records",
                             params={"offset": 0, "max_bytes": 1 << 22, "isolation": "read_committed"},
                             headers={"Accept": NDJSON}, timeout=60)
            assert r.status_code == 200, r.text
            return [json.loads(line) for line in r.text.splitlines()]
        finally:
            server.stop()

    old_rows = http_rows(tiered.config, tiered.tip.topic)
    assert len(old_rows) > 100 and http_rows(load_config(new_cfg), "renamed") == old_rows
    after = sorted(p.relative_to(storage_root) for p in storage_root.rglob("*") if p.is_file())
    # nothing copied: under the new topic id only the descriptors recording its references
    # (rlm.daemon.shared_objects), beside the old objects at most the adopters registry
    added = sorted(set(after) - set(before))
    assert set(before) <= set(after) and all(p.suffix == ".rlm_descriptor" for p in added)
    assert len([p for p in added if new_id.text in str(p)]) == len(tiered.tiered_segments())
    assert len([p for p in added if new_id.text not in str(p)]) <= 1

    assert main([*args, "--execute"]) == 0  # rerun: idempotent
    (again,) = json.loads(capsys.readouterr().out)["adopted"]
    assert again["written"] == 0 and again["already_present"] == n
    verify = ["verify", "--config", str(new_cfg), "--topic", "renamed", "--json"]
    assert main(verify) == 0, capsys.readouterr().out
    (report,) = json.loads(capsys.readouterr().out)["partitions"]
    end = done["next_offset"]
    assert report["tiers"]["remote_start"] == 0 and report["tiers"]["remote_end"] == end
    assert report["tiers"]["local_start"] == 0 and report["tiers"]["gap"] is None
    for f in pdir.glob(f"{0:020d}.*"):  # the local log now starts past the remote end: a hole
        f.rename(pdir / f"{end + 5:020d}{f.suffix}")
    assert main(verify) == 1
    (report,) = json.loads(capsys.readouterr().out)["partitions"]
    assert [(p["kind"], p["offsets"]) for p in report["problems"]] == [("local_gap", [end, end + 4])]

    # retention on an adopted segment deletes the original objects
    cfg = load_config(new_cfg)
    rsm, rlmm = load_rsm(cfg, -1), load_rlmm(cfg, -1, read_only=True)
    try:
        rlmm.follow_all()
        (tp,) = [tp for tp in rlmm.known_partitions() if tp.topic == "renamed"]
        first = min((md for md in rlmm.list_remote_log_segments(tp)
                     if md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
                    key=lambda md: md.start_offset)
        originals = [p for p in storage_root.rglob(f"*{first.remote_log_segment_id.id.text}*")
                     if tiered.tip.topic_id.text in str(p)]  # not the adopters' descriptors
        assert {p.suffix for p in originals} >= {".log", ".index", ".timeindex"}
        rsm.delete_log_segment_data(first)
        assert not any(p.exists() for p in originals)
    finally:
        rsm.close()
        rlmm.close()
