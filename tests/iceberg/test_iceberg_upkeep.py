"""The table's upkeep end to end: file sizing, compaction, orphans, lag (status, metrics), expiry.

A real broker, local remote storage and the file metadata store (the S3 warehouse and the topic
metadata store are test_iceberg.py's), the SQL catalog. One tiered topic whose
records carry CreateTime stamps on three past days (about two 1 MiB segments a day), so a table
fed one segment per snapshot has several small files per closed day. The tests run in file
order: sizing, compaction (with a dead writer's orphan), lag, then remote retention (the daemon
deletes the first day's segments) and expiry. What a confluent-kafka consumer reads from the
broker is the truth.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from pyiceberg.catalog import load_catalog

from rlm.config import load_config
from rlm.daemon.service import Daemon
from tests.daemon.helpers import create_topic, wait_for
from tests.iceberg.test_iceberg import Row, consumed, table_rows
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

DAY_MS = 86_400_000


class Up:
    def __init__(self, topic: str, bs: str, sidecar: dict[str, Any], tmp: Path, fetcher: Any) -> None:
        self.topic, self.bs, self.sidecar, self.tmp, self.fetcher = topic, bs, sidecar, tmp, fetcher
        (tmp / "wh").mkdir(exist_ok=True)
        self.catalog = {
            "type": "sql",
            "uri": f"sqlite:///{tmp / 'catalog.db'}",
            "warehouse": (tmp / "wh").as_uri(),
        }
        self.truth: list[Row] = []
        self.day0 = 0  # the first day's midnight (ms): records on it and the next two days

    def iceberg(self, name: str, **extra: Any) -> dict[str, Any]:
        return {"catalog": self.catalog, "table_name": name + "_{topic}", **extra}

    def config(self, name: str, **extra: Any) -> Path:
        """A reader config on the daemon's work dir (the daemon is stopped between tierings), so
        ``rlm status`` there shows the table too."""
        reader = {
            **self.sidecar,
            "read": {"fetch_max_wait_ms": 30_000},
            "iceberg": self.iceberg(name, **extra),
        }
        del reader["log_dirs"]
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(reader))
        return path

    def sync(self, name: str, **extra: Any) -> Any:
        from rlm.config import IcebergConfig
        from rlm.tables import IcebergSync

        cfg = IcebergConfig.model_validate(self.iceberg(name, **extra))
        return IcebergSync(self.fetcher, load_catalog("rlm", **self.catalog), cfg, self.topic)

    def table(self, name: str) -> Any:
        return load_catalog("rlm", **self.catalog).load_table(f"kafka.{name}_{self.topic.replace('.', '_')}")

    def result(self, name: str) -> dict[str, Any]:
        return {"catalog": self.catalog, "catalog_name": "rlm", "table": f"kafka.{name}_{self.topic}"}

    def tier(self) -> None:
        d = Daemon(load_config(None, **self.sidecar), once=True).start()
        assert d.run_once() == 0
        assert d.stop()

    def links(self) -> list[Any]:
        return list(self.fetcher.plan(self.topic, 0).segments)


def rlm(*args: str) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-m", "rlm.cli", *args], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout))


@pytest.fixture(scope="module")
def up(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    from fetcher import RemoteFetcher

    tmp = tmp_path_factory.mktemp("iceberg-upkeep")
    bs = kafka.bootstrap
    topic = f"iceup-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)  # 1 MiB segments
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    day0 = (int(time.time() * 1000) // DAY_MS - 3) * DAY_MS
    n = 4200  # three days of 1400 records of ~850 bytes: about two segments a day
    for i in range(n):
        ts = day0 + (i // 1400) * DAY_MS + (i % 1400) * 1000
        p.produce(
            topic,
            key=f"k{i}".encode(),
            value=hashlib.sha256(str(i).encode()).digest() * 26,
            partition=0,
            timestamp=ts,
            headers=[("i", str(i).encode())] if i % 5 == 0 else None,
        )
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    work = tmp / "work"
    sidecar: dict[str, Any] = {
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(work),
        "bootstrap_servers": bs,
        "storage": {"plugin": "local", "config": {"root": str(work / "remote"), "fsync": False}},
        "metadata": {"manager": "file", "config": {"dir": str(work / "metadata")}},
        "topics": [
            {"pattern": topic, "remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1}
        ],
        "task_interval_ms": 200,
        "http": {"enabled": False},
    }
    u = Up(topic, bs, sidecar, tmp, None)
    u.day0 = day0
    u.tier()
    reader = {**sidecar, "work_dir": str(tmp / "reader"), "read": {"fetch_max_wait_ms": 30_000}}
    del reader["log_dirs"]
    with RemoteFetcher.from_config(load_config(None, **reader)) as f:
        u.fetcher = f
        assert len(u.links()) >= 3
        u.truth = consumed(bs, topic, f.plan(topic, 0).log_end)
        yield u


def digest(table: Any) -> tuple[int, str]:
    """Row count and an order-free digest of every column of every row."""
    h: Counter[str] = Counter()
    for r in table.scan().to_arrow().to_pylist():
        h[hashlib.sha256(repr(sorted(r.items())).encode()).hexdigest()] += 1
    return sum(h.values()), hashlib.sha256(repr(sorted(h.items())).encode()).hexdigest()


def files_by_day(table: Any) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for task in table.scan().plan_files():
        out.setdefault(task.file.partition[0], []).append(task.file)
    return out


def test_the_writer_honours_the_target_file_size(up: Up) -> None:
    target = 400_000
    sync = up.sync("sized", target_file_size_bytes=target, segments_per_commit=8)
    assert sync.run_once().added_segments == len(up.links())
    days = files_by_day(sync.table)
    assert len(days) == 3
    files = [f for fs in days.values() for f in fs]
    assert len(files) >= 2 * len(days)  # ~1.2 MB a day, cut at the target
    assert all(f.file_size_in_bytes <= target for f in files)
    assert table_rows(up.result("sized"))[0] == up.truth


def test_compaction_rewrites_closed_days_in_one_commit_and_deletes_orphans(
    up: Up, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One segment per snapshot: several small files per day. ``rlm iceberg compact`` rewrites the
    two closed days' files as one file each, in one replace snapshot; the newest day is left
    alone; rows, ledger and answers are unchanged; a rerun of the writer adds nothing; the file
    a writer killed before its commit left behind is deleted."""
    import rlm.tables.writer as writer
    from rlm.tables import orphan_files, read_ledger
    from rlm.tables.compact import compact

    def die() -> None:
        raise KeyboardInterrupt("killed before the commit")

    monkeypatch.setattr(writer, "_hold_before_commit", die)
    with pytest.raises(KeyboardInterrupt):
        up.sync("compact", segments_per_commit=1).run_once()
    monkeypatch.undo()
    sync = up.sync("compact", segments_per_commit=1)
    assert sync.run_once().added_segments == len(up.links())
    table = up.table("compact")
    orphans = orphan_files(table)
    assert orphans
    before = files_by_day(table)
    newest = max(before)
    assert all(len(fs) >= 2 for d, fs in before.items() if d != newest)
    ledger_before, digest_before, snaps = read_ledger(table).segments, digest(table), len(table.snapshots())

    out = rlm(
        "iceberg",
        "compact",
        "--config",
        str(up.config("compact")),
        "--topic",
        up.topic,
        "--json",
        "--orphan-min-age-ms",
        "0",
    )
    closed = [d for d in before if d != newest]
    assert out["partitions"] == len(closed)
    assert out["files_rewritten"] == sum(len(before[d]) for d in closed)
    assert out["files_written"] == len(closed) and out["orphans_deleted"] == len(orphans)
    table = up.table("compact")
    assert len(table.snapshots()) == snaps + 1
    snap = table.current_snapshot()
    assert (
        snap.summary.operation.value == "replace" and "rlm.segments" not in snap.summary.additional_properties
    )
    after = files_by_day(table)
    assert all(len(after[d]) == 1 for d in closed)
    assert sorted(f.file_path for f in after[newest]) == sorted(f.file_path for f in before[newest])
    assert digest(table) == digest_before
    assert read_ledger(table).segments == ledger_before
    assert not orphan_files(table)
    assert table_rows(up.result("compact"))[0] == up.truth
    assert up.sync("compact").run_once().added_segments == 0  # the ledger is intact
    again = compact(load_catalog("rlm", **up.catalog), table.name()[0] + "." + table.name()[1])
    assert (again.files_rewritten, again.snapshot_id) == (0, None)


def test_lag_in_status_and_metrics(up: Up) -> None:
    """Behind by every lineage segment before the first pass, by none after it: what
    ``rlm iceberg`` writes for ``rlm status`` and what the metrics say."""
    from rlm.commands.iceberg_maint import PassHook
    from rlm.commands.status import render_iceberg
    from rlm.tables import read_ledger
    from rlm.tables.lag import measure

    sync = up.sync("lag")
    lag = measure(up.fetcher, sync.table, read_ledger(sync.table), up.topic, sync.identifier)
    links = up.links()
    assert (lag.segments_behind, lag.offsets_behind) == (len(links), links[-1].last + 1 - links[0].first)
    hook = PassHook(load_config(up.config("lag")), up.fetcher, sync, None)
    hook(sync.run_once(), 2.0)
    text = hook.metrics.render().decode()
    ident = sync.identifier
    assert f'rlm_iceberg_segments_behind{{partition="0",table="{ident}",topic="{up.topic}"}} 0.0' in text
    assert f'rlm_iceberg_offsets_behind{{partition="0",table="{ident}",topic="{up.topic}"}} 0.0' in text
    assert f'rlm_iceberg_segments_written_total{{table="{ident}"}} {float(len(links))}' in text
    assert f'rlm_iceberg_rows_per_second{{table="{ident}"}} {len(up.truth) / 2.0}' in text
    m = re.search(
        r'rlm_iceberg_last_commit_timestamp_seconds\{table="' + re.escape(ident) + r'"\} (\S+)', text
    )
    assert m and abs(float(m.group(1)) - sync.table.current_snapshot().timestamp_ms / 1000) < 0.01

    st = rlm("status", "--config", str(up.config("lag")), "--json")  # the hook wrote the lag file
    lag2 = next(t for t in st["iceberg"] if t["table"] == ident)
    assert (lag2["segments_behind"], lag2["offsets_behind"], lag2["segments"]) == (0, 0, len(links))
    assert lag2["last_commit_ms"] > 0 and lag2["partitions"][0]["table_end"] == links[-1].last + 1
    text = "\n".join(render_iceberg(st["iceberg"], int(time.time() * 1000)))
    assert f"{ident} ({up.topic}): 0 segments / 0 offsets behind" in text


def test_retention_then_expiry(up: Up) -> None:
    """Remote retention (``retention.ms`` reaching the first day) deletes the remote segments
    holding only that day's records, and the log start moves past them. The table keeps those
    rows by default (a rerun adds nothing, removes nothing); with ``expire_deleted_segments``
    one pass removes them, recorded, so the table holds exactly the records readers still serve;
    a second pass does nothing. A table built now never has a record below the log start."""
    from rlm.tables import read_ledger
    from rlm.tables.expire import EXPIRED_KEY, expire_deleted

    links = up.links()
    for name in ("hist", "hist2"):  # history tables built before retention
        up.sync(name).run_once()
    topics = up.sidecar["topics"]
    retention = int(time.time() * 1000) - (up.day0 + DAY_MS // 2)  # up to noon of the first day
    up.sidecar["topics"] = [{**topics[0], "retention.ms": retention}]
    try:
        up.tier()
    finally:
        up.sidecar["topics"] = topics
    gone = [
        link.metadata.remote_log_segment_id.id.text
        for link in links
        if link.metadata.max_timestamp_ms < up.day0 + DAY_MS // 2
    ]
    assert gone and len(gone) < len(links)
    wait_for("the reader sees retention", lambda: len(up.links()) == len(links) - len(gone), timeout=60)
    start = up.fetcher.log_start(up.topic, 0).offset
    assert start == up.links()[0].first == links[len(gone)].first
    served = [r for r in up.truth if r[0] >= start]

    fresh = up.sync("fresh")
    assert fresh.run_once().added_segments == len(up.links())
    assert table_rows(up.result("fresh"))[0] == served  # never a record below the log start
    old = up.sync("hist")  # built before retention: keeps the history by default
    assert old.run_once().added_segments == 0
    assert table_rows(up.result("hist"))[0] == up.truth

    r = expire_deleted(up.fetcher, load_catalog("rlm", **up.catalog), old.identifier, up.topic)
    assert r.below == {0: start} and r.rows_removed == len(up.truth) - len(served)
    assert {s[1] for s in r.segments} == set(gone)
    table = up.table("hist")
    assert table_rows(up.result("hist"))[0] == served
    assert json.loads(table.current_snapshot().summary.additional_properties[EXPIRED_KEY])["below"] == {
        "0": start
    }
    snaps = len(table.snapshots())
    assert expire_deleted(up.fetcher, load_catalog("rlm", **up.catalog), old.identifier, up.topic).below == {}
    assert len(up.table("hist").snapshots()) == snaps  # idempotent
    assert up.sync("hist").run_once().added_segments == 0  # expired segments stay recorded
    assert set(read_ledger(up.table("hist")).segments) >= set(gone)

    # the pass hook of `rlm iceberg` with the option on: one pass expires
    from rlm.commands.iceberg_maint import PassHook

    sync2 = up.sync("hist2")
    hook = PassHook(load_config(up.config("hist2", expire_deleted_segments=True)), up.fetcher, sync2, None)
    r2 = sync2.run_once()
    hook(r2, 1.0)
    assert (r2.added_segments, hook.expired_rows) == (0, len(up.truth) - len(served))
    assert table_rows(up.result("hist2"))[0] == served
