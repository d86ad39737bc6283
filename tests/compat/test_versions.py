"""The sidecar beside every Kafka version the test services start (issue 40): write, tier, let the
broker delete the tiered range, read it back equal.

Per version (``compat_kafka``: 2.8.2 ZooKeeper, 3.5.2, 3.9.2, 4.1.1 and 4.4.0 KRaft, one broker
each per session): a workload with every codec, keys (some null), headers (some null), an idempotent
producer, a committed and an aborted transaction; the broker's answers are recorded (a consumer
under both isolation levels); ``rlm check`` passes, ``rlm run --once`` tiers (the sidecar's own
per-topic ``remote.storage.enable``: none of these brokers has tiered storage on), ``rlm status``
shows the remote range; then the broker's own retention deletes the tiered segments and the read
core and ``rlm fetch`` answer what the broker served, under both isolation levels (the other read
faces: test_read_faces.py). The metadata topic has Kafka's default 50 partitions.

What an old broker lacks is met here: 2.8 refuses the topic config ``remote.storage.enable`` (the
metadata topic is created without it, and ``rlm check`` validates that same request); a 2.8
ZooKeeper broker writes no ``partition.metadata`` (the topic id comes from the broker, and a
partition whose id nobody knows is an error in ``rlm status``, never silence).
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.config import load_config
from tests.compat.conftest import Written, rlm, version_tuple
from tests.daemon.helpers import create_topic, wait_for
from tests.fetcher_e2e.conftest import CODECS, _produce_random, _producer, _watermarks
from tests.fetcher_e2e.test_remote_reads import _from_json

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_workload_has_every_codec(written: Written) -> None:
    """The tiered range holds a batch of every codec (values that compress: librdkafka sends a
    batch uncompressed when compression does not shrink it)."""
    assert set(CODECS) <= written.codecs, written.codecs


def test_check_passes_and_run_tiers(written: Written) -> None:
    """``rlm check`` and ``rlm run`` agree and succeed; before issue 40, 2.8 made run exit 3 on
    the metadata topic's ``remote.storage.enable`` after check had passed."""
    w = written
    assert w.check.returncode == 0, w.check.stdout + w.check.stderr
    assert w.run.returncode == 0, w.run.stderr[-3000:]
    assert "Traceback" not in w.run.stderr + w.check.stderr
    line = next(ln for ln in w.check.stdout.splitlines() if "metadata" in ln.lower() and "creatable" in ln)
    if version_tuple(w.cluster.version) < (3, 6):
        assert "remote.storage.enable" not in line, line  # what 2.8 and 3.5 would refuse
    else:
        assert "remote.storage.enable=false" in line, line


def test_status_shows_the_partition_tiered(written: Written) -> None:
    """Beside 2.8 (no partition.metadata) the topic id comes from the broker: the partition is
    tiered, not skipped without a word."""
    part = written.status["partitions"][f"{written.topic}-0"]
    assert part["tiered"] and part["last_error"] is None, part
    assert part["remote_segments"] >= 1 and part["ranges"]["remote"] == [0, written.remote_end]
    assert written.remote_end > 0
    if written.cluster.zookeeper and written.cluster.version.startswith("2."):
        assert not (written.cluster.log_dir / f"{written.topic}-0" / "partition.metadata").exists()


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_read_core_equals_the_broker(written: Written, isolation: str) -> None:
    from fetcher import RemoteFetcher
    from tests.fetcher_e2e.test_remote_reads import fetch_all

    w = written
    assert _watermarks(w.cluster.bootstrap, w.topic)[0] >= w.remote_end > 0, "not deleted locally"
    want = w.want(isolation)
    cfg = load_config(w.reader_path)
    with RemoteFetcher.from_config(cfg) as f:
        got, _ = fetch_all(f, w, isolation)  # type: ignore[arg-type]  # duck-typed: topic, remote_end
    assert got == want
    if isolation == "read_committed":
        assert len(want) < len(w.want("read_uncommitted")), "no aborted records tiered"


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_cli_fetch_equals_the_broker(written: Written, isolation: str) -> None:
    """A cold ``rlm fetch`` (new process, empty work dir, 50 metadata partitions, default wait):
    before the cold-read fix it failed after ~27 s ('is not loaded after 10000 ms')."""
    w = written
    cold = w.reader(f"fetch-{isolation}")
    res = rlm("fetch", "--config", str(cold), "--topic", w.topic, "--offset", "0", "--isolation", isolation)
    assert res.returncode == 0, res.stderr[-3000:]
    assert [_from_json(line.encode()) for line in res.stdout.splitlines()] == w.want(isolation)


def test_standalone_topic_id_comes_from_partition_metadata_or_is_an_error(
    written: Written, tmp_path: Path
) -> None:
    """Standalone (no broker to ask): beside a version that writes ``partition.metadata`` the topic
    id comes from it and the partition is tiered; beside 2.8's log dir (none) the partition the
    configuration asks to tier is an error in ``rlm status`` and a metric, not skipped without a
    word as before issue 40."""
    from rlm.daemon.service import Daemon

    w = written
    has_id = (w.cluster.log_dir / f"{w.topic}-0" / "partition.metadata").exists()
    # 2.8.2 (ZooKeeper) here writes none; 3.5.2 in both modes and every later version do
    assert has_id == (version_tuple(w.cluster.version) >= (3, 0)), w.cluster.version
    doc: dict[str, Any] = {
        "log_dirs": [str(w.cluster.log_dir)],
        "node_id": 1,
        "work_dir": str(tmp_path / "work"),
        "storage": {"plugin": "local", "config": {"root": str(tmp_path / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(tmp_path / "meta")}},
        "topics": [{"pattern": w.topic, "remote.storage.enable": True}],
        "http": {"enabled": False},
    }
    d = Daemon(load_config(None, **doc), once=True).start()
    try:
        assert d.run_once() == 0
        gauge = d.metrics.unprotected.labels(w.topic, "0")._value.get()
    finally:
        assert d.stop()
    config_path = tmp_path / "rlm.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    res = rlm("status", "--json", "--config", str(config_path))
    part = json.loads(res.stdout)["partitions"][f"{w.topic}-0"]
    if has_id:
        assert gauge == 0
        # protected (the broker already deleted what the written fixture tiered, so nothing may be
        # left to copy: the outcome is the absent error, not a count)
        assert part["tiered"] and part["last_error"] is None, part
        return
    assert gauge == 1
    assert not part["tiered"] and part["last_error"].startswith("NOT PROTECTED: topic id unknown"), part
    assert "bootstrap_servers" in part["last_error"]
    table = rlm("status", "--config", str(config_path)).stdout
    assert f"ERROR {w.topic}-0: {part['last_error']}" in table.splitlines(), table


def test_verify_fails_on_an_enabled_partition_with_nothing_remote(written: Written, tmp_path: Path) -> None:
    """``rlm verify`` walks the metadata store, so before issue 40 a partition the daemon never
    tiered was invisible to it: clean while the broker's retention could delete everything."""
    w = written
    ok = rlm("verify", "--config", str(w.config_path), "--topic", w.topic)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    topic = f"untiered-{uuid.uuid4().hex[:8]}"
    create_topic(w.cluster.bootstrap, topic)
    _produce_random(_producer(w.cluster.bootstrap), topic, 2500, random.Random(1), "u")  # > 1 segment
    wait_for("a rolled segment", lambda: len(list((w.cluster.log_dir / f"{topic}-0").glob("*.log"))) >= 2)
    doc = yaml.safe_load(w.config_path.read_text())
    doc["topics"] = [{"pattern": topic, "remote.storage.enable": True}]
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    res = rlm("verify", "--config", str(cfg), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    found = json.loads(res.stdout)["not_tiered"]
    assert [p["partition"] for p in found] == [f"{topic}-0"] and found[0]["kind"] == "not_tiered"
    text = rlm("verify", "--config", str(cfg)).stdout
    assert f"{topic}-0: not_tiered: " in text and "(exit status 1)" in text


def test_future_format_versions_are_refused_by_name(written: Written, tmp_path: Path) -> None:
    """A log dir of a format this sidecar does not know is refused naming the version: a
    ``partition.metadata`` of version 1 makes the partition NOT PROTECTED (never guessed from the
    broker, never skipped silently), a ``meta.properties`` of version 2 stops ``rlm run``."""
    import shutil

    from rlm.daemon.service import Daemon

    w = written
    logs = tmp_path / "logs"
    src = w.cluster.log_dir / f"{w.topic}-0"
    shutil.copytree(src, logs / src.name, ignore=shutil.ignore_patterns("*.deleted", "*.cleaned", "*.swap"))
    (logs / src.name / "partition.metadata").write_text("version: 1\ntopic_id: VHatZigQQGqs7ccJ5sZVng")
    (logs / "meta.properties").write_text(
        f"version=0\nbroker.id=1\ncluster.id={w.cluster.cluster_id or 'x'}\n"
    )
    doc: dict[str, Any] = {
        "log_dirs": [str(logs)],
        "work_dir": str(tmp_path / "work"),
        "bootstrap_servers": w.cluster.bootstrap,  # the broker knows the topic's id: still refused
        "storage": {"plugin": "local", "config": {"root": str(tmp_path / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(tmp_path / "meta")}},
        "topics": [{"pattern": w.topic, "remote.storage.enable": True}],
        "http": {"enabled": False},
    }
    d = Daemon(load_config(None, **doc), once=True).start()
    try:
        assert d.run_once() == 0
    finally:
        assert d.stop()
    config_path = tmp_path / "rlm.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    part = json.loads(rlm("status", "--json", "--config", str(config_path)).stdout)["partitions"][
        f"{w.topic}-0"
    ]
    assert not part["tiered"] and "unrecognised version 1" in part["last_error"], part
    assert part["last_error"].startswith("NOT PROTECTED: partition.metadata not understood"), part

    (logs / "meta.properties").write_text("version=2\nnode.id=1\ncluster.id=x\n")
    run = rlm("run", "--once", "--config", str(config_path))
    assert run.returncode == 3, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("rlm: error:") and "meta.properties version 2" in last, last
