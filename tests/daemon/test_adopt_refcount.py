"""Objects shared by adoption are reference-counted, and adopted lineages survive a second disaster.

Without a broker (retention is the sidecar's, not the broker's): a mixed partition is tiered under
topic id A (local plugin, file metadata store). Two new clusters adopt it — "staging" keeps the
source's reference, "production" releases it (``--release-source``: the old cluster is gone).

* ``rlm verify`` on each adopter finds every reference recorded and names the other holders;
* the bucket alone (a second disaster: every metadata store lost) rebuilds **both** adopted
  lineages, and the read core answers from the rebuilt store what it answered from the original;
  the released source lineage is reported as released, not resurrected;
* staging's daemon expires all of its history: nothing production reads is deleted (it reads
  everything as before), and ``rlm verify`` on the source store finds no orphan (the objects it
  no longer names are still referenced);
* production's daemon expires all of its history: no segment object is left in the bucket.

Before reference counting, staging's retention deleted the original objects production read, and
a rebuild found no adopted partition at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fetcher import RemoteFetcher
from rlm.cli import main
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.plugin_setup import load_rlmm
from rlm.types import KafkaUuid, RemoteLogSegmentState
from tests.daemon.rebuild_helpers import read_path
from tests.daemon.test_restore import new_broker_dir
from tests.fetcher._tiered import Tiered, tier


@pytest.fixture
def tiered(tmp_path: Path) -> Tiered:
    t = tier(tmp_path / "source")
    (t.work / "rlm.yaml").write_text(json.dumps({
        "log_dirs": [str(t.logs)], "work_dir": str(t.work), "http": {"enabled": False}}))
    return t


def cluster(base: Path, name: str, storage_root: Path) -> tuple[Path, KafkaUuid]:
    """A new cluster's (stopped) broker dir for topic ``name`` and its sidecar configuration: same
    storage, its own file metadata store; remote retention 1 ms (everything adopted is old)."""
    _, new_id = new_broker_dir(base / "logs", name)
    cfg = base / "rlm.yaml"
    cfg.write_text(json.dumps({
        "log_dirs": [str(base / "logs")], "work_dir": str(base), "http": {"enabled": False}, "node_id": 1,
        "storage": {"plugin": "local", "config": {"root": str(storage_root)}},
        "topics": [{"pattern": name, "remote.storage.enable": True, "retention.ms": 1}]}))
    return cfg, new_id


def run(capsys: pytest.CaptureFixture[str], *args: str, status: int = 0) -> Any:
    capsys.readouterr()
    assert main([*args, "--json"]) == status
    return json.loads(capsys.readouterr().out)


def records(cfg: Path, topic: str) -> list[Any]:
    with RemoteFetcher.from_config(load_config(cfg)) as f:
        return read_path(f, topic)[1]


def segment_objects(root: Path) -> list[str]:
    """The bucket's segment files (not descriptors, registries or log-start objects)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.suffix in {".log", ".index", ".timeindex", ".snapshot", ".txnindex"})


def expire_all(cfg: Path, topic: str) -> None:
    """One daemon pass with retention.ms 1: every adopted segment expires."""
    d = Daemon(load_config(cfg), once=True).start()
    assert d.run_once() == 0
    assert d.stop()
    rlmm = load_rlmm(load_config(cfg), -1, read_only=True)
    try:
        rlmm.follow_all()
        (tp,) = [tp for tp in rlmm.known_partitions() if tp.topic == topic]
        states = {md.state for md in rlmm.list_remote_log_segments(tp)}
    finally:
        rlmm.close()
    assert states <= {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}, states  # the file store drops them


def test_two_adoptions_share_objects_safely_and_survive_a_second_disaster(
        tiered: Tiered, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, src = tiered.work / "remote", tiered.work / "rlm.yaml"
    original = records(src, tiered.tip.topic)
    assert len(original[0]) > 100 and original[2], "records, and an aborted transaction"
    stored_before = segment_objects(root)
    adopt = ["restore", "--config", str(src), "--topic", tiered.tip.topic, "--execute"]
    staging, staging_id = cluster(tmp_path / "staging", "staging", root)
    production, production_id = cluster(tmp_path / "production", "production", root)
    (st,) = run(capsys, *adopt, "--to-topic", "staging", "--log-dir", str(tmp_path / "staging" / "logs"),
                "--adopt-into", str(staging))["adopted"]
    (pr,) = run(capsys, *adopt, "--to-topic", "production", "--log-dir",
                str(tmp_path / "production" / "logs"), "--adopt-into", str(production),
                "--release-source")["adopted"]
    n = st["segments"]
    assert st["referenced"] == pr["referenced"] == n > 2 and pr["released_source"]
    assert segment_objects(root) == stored_before  # nothing copied
    assert records(staging, "staging") == records(production, "production") == original

    # rlm verify: every adopted segment's reference is recorded, the other holders named
    (rep,) = run(capsys, "verify", "--config", str(staging), "--topic", "staging")["partitions"]
    assert not rep["problems"] and len(rep["shared"]) == n
    assert all(holders == [f"{production_id.text}:production-0"] for holders in rep["shared"].values()), \
        rep["shared"]  # the source released its reference: production is the only other holder

    # a second disaster: the bucket alone rebuilds both adopted lineages, not the released one
    rebuilt = tmp_path / "rebuilt" / "rlm.yaml"
    rebuilt.parent.mkdir()
    rebuilt.write_text(json.dumps({"work_dir": str(rebuilt.parent), "http": {"enabled": False},
                                   "storage": {"plugin": "local", "config": {"root": str(root)}}}))
    plans = {p["topic"]: p for p in run(capsys, "metadata", "rebuild", "--config", str(rebuilt),
                                        "--execute")["partitions"]}
    assert {t: (len(p["keep"]), len(p["released"]), p["unusable"]) for t, p in plans.items()} == {
        "staging": (n, 0, []), "production": (n, 0, []), tiered.tip.topic: (0, n, [])}
    assert plans["staging"]["topic_id"] == staging_id.text
    assert records(rebuilt, "staging") == records(rebuilt, "production") == original

    # staging expires everything: production still reads all of it, the source sees no orphan
    expire_all(staging, "staging")
    assert segment_objects(root) == stored_before
    assert records(production, "production") == original
    src_report = run(capsys, "verify", "--config", str(src), "--topic", tiered.tip.topic)
    assert src_report["ok"], src_report

    # production expires everything: nothing is left
    expire_all(production, "production")
    assert segment_objects(root) == []


def test_the_sources_retention_keeps_what_an_adopter_reads(
        tiered: Tiered, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The other direction: the source (the recovery store, or the old cluster) runs retention over
    history an adopter reads. Its segments are released, not deleted; ``rlm verify`` on the source
    sees the objects it no longer names as shared, not as orphans (so ``--repair`` keeps them)."""
    root, src = tiered.work / "remote", tiered.work / "rlm.yaml"
    original = records(src, tiered.tip.topic)
    stored_before = segment_objects(root)
    prod, _ = cluster(tmp_path / "prod", "prod", root)
    run(capsys, "restore", "--config", str(src), "--topic", tiered.tip.topic, "--to-topic", "prod",
        "--log-dir", str(tmp_path / "prod" / "logs"), "--adopt-into", str(prod), "--execute")
    doc = json.loads(src.read_text())
    doc["topics"] = [{"pattern": tiered.tip.topic, "remote.storage.enable": True, "retention.ms": 1}]
    src.write_text(json.dumps(doc))
    expire_all(src, tiered.tip.topic)
    assert segment_objects(root) == stored_before
    assert records(prod, "prod") == original
    capsys.readouterr()  # (the source's log dir still holds the local segments: verify may say so)
    main(["verify", "--config", str(src), "--topic", tiered.tip.topic, "--repair", "--execute", "--json"])
    report = json.loads(capsys.readouterr().out)
    (part,) = report["partitions"]
    assert part["problems"] == [] and report["repairs"] == [], report  # no orphan_object
    assert len(part["shared"]) == len(tiered.tiered_segments())
    assert segment_objects(root) == stored_before
    expire_all(prod, "prod")
    assert segment_objects(root) == []
