"""``rlm iceberg`` end to end: a real broker, SeaweedFS, the topic metadata store, the SQL catalog.

One tiered topic (built once for the module): two codecs, a committed and an aborted transaction
each larger than a segment (so each crosses a segment roll). What a read_committed
confluent-kafka consumer reads from the broker is the truth the table is compared with, row for
row. The tests run in file order on the same topic: backfill, rerun, crash, two writers, then
more data tiered and followed; last, a second tiered topic shares a table with it
(``iceberg.shared_tables``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from pyiceberg.catalog import load_catalog

from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.tables import HOLD_BEFORE_COMMIT_ENV
from tests.daemon.helpers import create_topic, s3_storage, topic_rlmm, transactional_producer, wait_for
from tests.services.kafka import KafkaCluster
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY, SeaweedFS

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]

# (offset, timestamp type (Spark's: 0 create, 1 log append), timestamp ms, key, value, headers)
Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass
class World:
    topic: str
    bootstrap: str
    sidecar: dict[str, Any]
    catalog: dict[str, str]
    tmp: Path
    fetcher: Any  # the module's RemoteFetcher (plans, and in-process writers)
    truth: list[Row]  # what a read_committed consumer read from the broker
    configs: dict[str, Path] = field(default_factory=dict)

    def iceberg(self, name: str, **iceberg: Any) -> dict[str, Any]:
        return {"catalog": self.catalog, "table_name": name + "_{topic}", **iceberg}

    def config(self, name: str, **iceberg: Any) -> Path:
        """A reader config of its own (work dir, metadata consumer dir) on the shared catalog."""
        key = f"{name}-{json.dumps(iceberg, sort_keys=True)}"
        if key not in self.configs:
            work = self.tmp / f"reader-{len(self.configs)}"
            reader = {**self.sidecar, "work_dir": str(work), "metadata": topic_rlmm(self.bootstrap, work),
                      "read": {"fetch_max_wait_ms": 30_000}, "iceberg": self.iceberg(name, **iceberg)}
            del reader["log_dirs"]
            path = self.tmp / f"{name}-{len(self.configs)}.yaml"
            path.write_text(yaml.safe_dump(reader))
            self.configs[key] = path
        return self.configs[key]

    def sync(self, name: str, topic: str | None = None, **iceberg: Any) -> Any:
        """An in-process writer of table ``name`` (the same code the command runs)."""
        from rlm.config import IcebergConfig
        from rlm.tables import IcebergSync

        cfg = IcebergConfig.model_validate(self.iceberg(name, **iceberg))
        catalog = load_catalog("rlm", **iceberg.get("catalog", self.catalog))
        return IcebergSync(self.fetcher, catalog, cfg, topic or self.topic)

    def tier(self) -> None:
        d = Daemon(load_config(None, **self.sidecar), once=True).start()
        assert d.run_once() == 0
        assert d.stop()

    def plan_ids(self, topic: str | None = None) -> list[str]:
        """The remote segments on the lineage, as the read core plans them (kept about a second)."""
        links = self.fetcher.plan(topic or self.topic, 0).segments
        return [link.metadata.remote_log_segment_id.id.text for link in links]

    def segment_of(self, offsets: Iterable[int], topic: str | None = None) -> list[str]:
        """The id of the lineage segment holding each offset (partition 0)."""
        links = self.fetcher.plan(topic or self.topic, 0).segments
        spans = [(link.first, link.last, link.metadata.remote_log_segment_id.id.text) for link in links]
        return [next(sid for lo, hi, sid in spans if lo <= o <= hi) for o in offsets]

    def remote_end(self, topic: str | None = None) -> int:
        return int(self.fetcher.plan(topic or self.topic, 0).log_end)


def _rlm(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rlm.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def run_iceberg(config: Path, topic: str, *extra: str) -> dict[str, Any]:
    p = _rlm("iceberg", "--config", str(config), "--topic", topic, "--json", *extra)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    return dict(json.loads(out))


def _produce(bs: str, topic: str, n: int, rnd: random.Random, tag: str, codec: str,
             partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5,
                  "compression.type": codec})
    for i in range(n):
        headers = [("h", f"{tag}{i}".encode()), ("nil", None)] if i % 7 == 0 else None
        key = None if i % 11 == 0 else f"{tag}-{i}".encode()
        p.produce(topic, key=key, value=rnd.randbytes(rnd.randint(300, 900)), partition=partition,
                  headers=headers)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _txn(bs: str, topic: str, n: int, rnd: random.Random, tag: str, commit: bool) -> None:
    p = transactional_producer(bs, f"{topic}-{tag}")
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, key=f"{tag}{i}".encode(), value=rnd.randbytes(600), partition=0,
                  headers=[("txn", tag.encode())])
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0  # written before the outcome (abort alone would purge the queue)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def consumed(bs: str, topic: str, until: int, isolation: str = "read_committed",
             partition: int = 0) -> list[Row]:
    """What a consumer reads from offset 0 of ``partition`` below ``until``."""
    c = Consumer({"bootstrap.servers": bs, "group.id": f"ice-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[Row] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error() is not None or m.offset() >= until:
                    continue
                ts_type, ts = m.timestamp()
                out.append((m.offset(), ts_type - 1, ts, m.key(), m.value(),
                            tuple((k, v) for k, v in (m.headers() or []))))
            if c.position([TopicPartition(topic, partition)])[0].offset >= until:
                return out
        raise AssertionError(f"consumer did not reach offset {until}")
    finally:
        c.close()


def table_rows(result: dict[str, Any], topic: str | None = None) -> tuple[list[Row], list[str]]:
    """The table (``topic``'s rows of it) read back with PyIceberg: rows in offset order, and each
    row's segment id."""
    from pyiceberg.expressions import AlwaysTrue, EqualTo

    table = load_catalog(result["catalog_name"], **result["catalog"]).load_table(result["table"])
    where = AlwaysTrue() if topic is None else EqualTo("topic", topic)
    t = table.scan(row_filter=where).to_arrow().sort_by([("offset", "ascending")])
    rows: list[Row] = []
    for r in t.to_pylist():
        hdrs = tuple((h["key"], h["value"]) for h in (r["headers"] or []))
        rows.append((r["offset"], r["timestampType"], int(r["timestamp"].timestamp() * 1000), r["key"],
                     r["value"], hdrs))
    return rows, [str(s) for s in t.column("segment_id").to_pylist()]


def new_world(kafka: KafkaCluster, seaweedfs: SeaweedFS, tmp: Path, topic: str, bucket: str) -> World:
    """A world of ``topic``: a sidecar tiering it (never expiring) to a bucket of its own, and an
    empty SQL catalog with its warehouse under ``tmp``."""
    work = tmp / "work"
    sidecar: dict[str, Any] = {
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(work),
        "bootstrap_servers": kafka.bootstrap,
        "storage": s3_storage(seaweedfs, seaweedfs.create_bucket(bucket)),
        "metadata": topic_rlmm(kafka.bootstrap, work),
        "topics": [{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1,
                    "retention.bytes": -1}],
        "task_interval_ms": 200,
        "http": {"enabled": False},
    }
    (tmp / "iceberg" / "warehouse").mkdir(parents=True)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp / 'iceberg' / 'catalog.db'}",
               "warehouse": (tmp / "iceberg" / "warehouse").as_uri()}
    return World(topic, kafka.bootstrap, sidecar, catalog, tmp, None, [])


@pytest.fixture(scope="module")
def world(kafka: KafkaCluster, seaweedfs: SeaweedFS,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from fetcher import RemoteFetcher

    tmp = tmp_path_factory.mktemp("iceberg")
    bs = kafka.bootstrap
    topic = f"ice-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)  # 1 MiB segments
    rnd = random.Random(24)
    _produce(bs, topic, 1200, rnd, "gz", "gzip")
    _txn(bs, topic, 2000, rnd, "c", commit=True)  # 1.2 MB: crosses a segment roll
    _produce(bs, topic, 800, rnd, "zs", "zstd")
    _txn(bs, topic, 2000, rnd, "a", commit=False)  # 1.2 MB: crosses a segment roll
    _produce(bs, topic, 1500, rnd, "zs2", "zstd")
    w = new_world(kafka, seaweedfs, tmp, topic, "iceberg-e2e")
    w.tier()
    with RemoteFetcher.from_config(load_config(w.config("plan"))) as f:
        w.fetcher = f
        w.truth = consumed(bs, topic, w.remote_end())
        assert len(w.plan_ids()) >= 4
        yield w


def _check_equal(world: World, result: dict[str, Any], ids: list[str]) -> list[Row]:
    """The table holds exactly the lineage segments ``ids``: row for row what the consumer read."""
    rows, seg_of_row = table_rows(result)
    end = world.remote_end()
    truth = [r for r in world.truth if r[0] < end]
    assert [r[0] for r in rows] == [r[0] for r in truth]  # no duplicate, no missing offset
    assert rows == truth
    assert result["segments"] == len(ids) and set(seg_of_row) <= set(ids)
    assert seg_of_row == world.segment_of(r[0] for r in rows)  # each row names the segment holding it
    assert result["rows"] == len(truth)
    assert not any(r[5] == (("txn", b"a"),) for r in rows)  # the aborted transaction is not
    return rows


def _result(world: World, name: str) -> dict[str, Any]:
    """What ``--json`` says, for an in-process writer's table."""
    from rlm.tables import read_ledger

    sync = world.sync(name)
    ledger = read_ledger(sync.table)
    return {"catalog": world.catalog, "catalog_name": "rlm", "table": sync.identifier,
            "segments": ledger.segment_count, "rows": ledger.rows, "snapshots": ledger.snapshots}


def _hold(world: World, name: str, marker: Path, **iceberg: Any) -> subprocess.Popen[str]:
    """``rlm iceberg`` stopped after its first data files, before their commit."""
    p = _rlm("iceberg", "--config", str(world.config(name, **iceberg)), "--topic", world.topic, "--json",
             env={HOLD_BEFORE_COMMIT_ENV: str(marker)})
    wait_for("the writer holds before its commit", marker.exists, timeout=120)
    return p


def test_kill9_before_the_commit_then_backfill_equals_a_read_committed_consumer(world: World) -> None:
    """``rlm iceberg`` killed (-9) between its first data files and their commit; the rerun
    (``--from earliest``) backfills every lineage segment once, equal to the consumer's read,
    and reports the dead writer's files as orphans."""
    marker = world.tmp / "hold-crash"
    p = _hold(world, "main", marker)
    try:
        os.kill(int(marker.read_text()), signal.SIGKILL)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGKILL
    assert _result(world, "main")["segments"] == 0  # nothing committed
    result = run_iceberg(world.config("main"), world.topic, "--from", "earliest")
    ids = world.plan_ids()
    assert result["table"] == f"kafka.main_{world.topic.replace('.', '_')}"
    assert result["added_segments"] == len(ids) and result["waiting_segments"] == 0
    assert result["orphan_files"] >= 1  # the killed writer's files: in no snapshot, reported
    rows = _check_equal(world, result, ids)
    assert any(r[5] == (("txn", b"c"),) for r in rows)  # the committed transaction is in

    table = load_catalog(result["catalog_name"], **result["catalog"]).load_table(result["table"])
    assert str(table.schema().find_field("timestamp").field_type) == "timestamptz"
    assert str(table.spec().fields[0].transform) == "day"
    # one snapshot per group of segments (default 4), each naming its segments
    snaps = table.snapshots()
    assert len(snaps) == -(-len(ids) // 4)
    named = [s for snap in snaps for s in json.loads(snap.summary.additional_properties["rlm.segments"])]
    assert sorted(n[1] for n in named) == sorted(ids)
    # rows sorted by (partition, offset) within each data file
    for task in table.scan().plan_files():
        import pyarrow.parquet as pq

        offsets = pq.read_table(task.file.file_path.removeprefix("file://"), columns=["offset"]).column(0)
        assert offsets.to_pylist() == sorted(offsets.to_pylist())


def test_rerun_adds_nothing(world: World) -> None:
    world.sync("main").run_once()  # (a no-op after the backfill test; it makes this test standalone)
    before = _result(world, "main")
    r = world.sync("main").run_once()
    assert (r.added_segments, r.added_rows, r.conflicts) == (0, 0, 0)
    assert _result(world, "main") == before


def test_expiring_every_snapshot_but_the_newest_then_a_rerun_adds_nothing(world: World) -> None:
    """Issue 41's reproduction: ``rlm iceberg``, every snapshot but the newest expired with
    PyIceberg, ``rlm iceberg`` again: the table still equals the consumer's read. (The ledger
    was the union of the appends' summaries over the ancestry: the rerun appended every segment
    the expired snapshots named a second time.)"""
    cfg = world.config("expiry", segments_per_commit=1)
    first = run_iceberg(cfg, world.topic)
    ids = world.plan_ids()
    assert first["added_segments"] == len(ids)
    table = load_catalog(first["catalog_name"], **first["catalog"]).load_table(first["table"])
    keep = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    older = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != keep]
    assert len(older) == len(ids) - 1  # (a commit per segment)
    table.maintenance.expire_snapshots().by_ids(older).commit()
    again = run_iceberg(cfg, world.topic)
    assert (again["added_segments"], again["snapshots"]) == (0, 1)
    _check_equal(world, again, ids)


def _spark_literal(ms: int) -> str:
    """A Spark SQL ``TIMESTAMP`` literal of epoch milliseconds ``ms``, in UTC."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def check_spark41_reads(world: World, result: dict[str, Any], spark_catalog: dict[str, str],
                        env: dict[str, str] | None = None) -> None:
    """Spark SQL through Iceberg's own ``SparkCatalog`` (``spark_catalog``: the Iceberg catalog's
    properties) reads ``result``'s table row for row as the read_committed consumer did, and a
    day's and a half's ``WHERE timestamp`` counts match the consumer's and PyIceberg's. The
    runtime exists for Spark 4.0/4.1 only, so this runs a separate pyspark 4.1
    (``tests/services/spark41.py``) in a subprocess (``spark41_read.py``)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    from tests.services.proc import kill, spawn
    from tests.services.spark41 import spark41

    truth = [r for r in world.truth if r[0] < world.remote_end()]
    assert table_rows(result)[0] == truth and len(truth) > 100
    day_start = datetime.fromtimestamp(truth[0][2] / 1000, UTC).replace(hour=0, minute=0, second=0,
                                                                      microsecond=0)
    day_end = day_start + timedelta(days=1)
    cutoff = truth[len(truth) // 2][2]
    expect_day = sum(1 for r in truth if day_start.timestamp() * 1000 <= r[2] < day_end.timestamp() * 1000)
    expect_after = sum(1 for r in truth if r[2] >= cutoff)
    assert 0 < expect_after < len(truth)
    table = load_catalog(result["catalog_name"], **result["catalog"]).load_table(result["table"])
    in_day = table.scan(row_filter=And(GreaterThanOrEqual("timestamp", day_start.isoformat()),
                                       LessThan("timestamp", day_end.isoformat()))).to_arrow()
    assert in_day.num_rows == expect_day

    s = spark41()
    args = {"catalog_name": result["catalog_name"], "catalog": spark_catalog, "table": result["table"],
            "jars": [str(j) for j in s.jars],
            "day_start": _spark_literal(int(day_start.timestamp() * 1000)),
            "day_end": _spark_literal(int(day_end.timestamp() * 1000)), "cutoff": _spark_literal(cutoff)}
    out = world.tmp / f"spark41-{uuid.uuid4().hex[:8]}.json"
    log = out.with_suffix(".log")
    full = {k: v for k, v in os.environ.items()  # the project's Spark 4.3 must not leak in
            if k not in ("SPARK_HOME", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                         "PYSPARK_SUBMIT_ARGS")}
    full.update(SPARK_LOCAL_IP="127.0.0.1", **(env or {}))
    p = spawn([str(s.python), str(Path(__file__).with_name("spark41_read.py")), json.dumps(args), str(out)],
              log=log, env=full)
    try:
        p.wait(600)
    finally:
        kill(p)
    assert p.returncode == 0, log.read_text(errors="replace")[-4000:]
    got = json.loads(out.read_text())
    assert got["spark"].startswith("4.1.")
    spark_rows: list[Row] = []
    for off, part, ts_type, ts, key, value, headers in got["rows"]:
        assert part == 0
        spark_rows.append((off, ts_type, ts, None if key is None else bytes.fromhex(key),
                           None if value is None else bytes.fromhex(value),
                           tuple((k, None if v is None else bytes.fromhex(v)) for k, v in headers or [])))
    assert [r[0] for r in spark_rows] == [r[0] for r in truth]
    assert spark_rows == truth
    assert (got["day"], got["after"]) == (expect_day, expect_after)


@pytest.mark.spark
def test_spark_sql_through_the_iceberg_runtime_reads_what_the_consumer_read(world: World) -> None:
    """Spark 4.1 SQL through ``iceberg-spark-runtime``'s ``SparkCatalog``, a JdbcCatalog on the
    SQLite file PyIceberg writes (the catalog name is PyIceberg's: the JDBC catalog keys its rows
    by it): row for row the consumer's read, the ``WHERE timestamp`` counts its counts."""
    world.sync("main").run_once()  # (a no-op after the backfill test; it makes this test standalone)
    check_spark41_reads(world, _result(world, "main"), {
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "uri": "jdbc:sqlite:" + world.catalog["uri"].removeprefix("sqlite:///"),
        "warehouse": world.catalog["warehouse"]})


def test_a_writer_that_loses_the_commit_race_adds_nothing(world: World,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer A has written its files when B adds every segment; A's commit then conflicts, A
    reads the ledger again, finds its segments taken, deletes its files and adds nothing."""
    import rlm.tables.writer as writer
    from rlm.tables import orphan_files

    holding, go = threading.Event(), threading.Event()

    def hold() -> None:  # the seam, for writer A's thread only
        if threading.current_thread().name == "writer-a":
            holding.set()
            assert go.wait(120)

    monkeypatch.setattr(writer, "_hold_before_commit", hold)
    a_sync = world.sync("race", segments_per_commit=1)
    got: list[Any] = []
    a = threading.Thread(target=lambda: got.append(a_sync.run_once()), name="writer-a")
    a.start()
    try:
        assert holding.wait(120)
        b = world.sync("race", segments_per_commit=1).run_once()
    finally:
        go.set()
        a.join(120)
    ids = world.plan_ids()
    assert b.added_segments == len(ids)
    assert got[0].added_segments == 0 and got[0].conflicts >= 1
    _check_equal(world, _result(world, "race"), ids)
    table = load_catalog("rlm", **world.catalog).load_table(b_table := a_sync.identifier)
    assert len(table.snapshots()) == len(ids), b_table  # a snapshot per segment, none twice
    assert not orphan_files(table)  # the loser deleted its own files


def run_at_once(syncs: list[Any], timeout: float = 180) -> list[Any]:
    """Each writer's ``run_once()`` on its own thread, started together: their pass results."""
    results: list[Any] = [None] * len(syncs)

    def run(i: int) -> None:
        results[i] = syncs[i].run_once()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(syncs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results


def test_two_writers_at_once_add_each_segment_once(world: World) -> None:
    results = run_at_once([world.sync("pair", segments_per_commit=1) for _ in range(2)])
    ids = world.plan_ids()
    assert sum(r.added_segments for r in results) == len(ids)
    _check_equal(world, _result(world, "pair"), ids)


def test_segments_past_the_read_committed_bound_wait(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A segment ending past the read_committed bound (its transactions' outcome unknown) is not
    appended, nor any after it; once the bound moves past them they are."""
    from fetcher import CommittedBound

    links = world.fetcher.plan(world.topic, 0).segments
    bound = links[2].first + 1  # inside the third segment
    real = world.fetcher.committed_bound
    monkeypatch.setattr(world.fetcher, "committed_bound",
                        lambda topic, p: CommittedBound(bound, (), True))
    sync = world.sync("lso")
    r = sync.run_once()
    assert (r.added_segments, r.waiting) == (2, len(links) - 2)
    rows, _ = table_rows(_result(world, "lso"))
    assert rows == [t for t in world.truth if t[0] <= links[1].last]
    monkeypatch.setattr(world.fetcher, "committed_bound", real)
    r = sync.run_once()
    assert (r.added_segments, r.waiting) == (len(links) - 2, 0)
    assert table_rows(_result(world, "lso"))[0] == world.truth


@pytest.mark.parametrize(("partition_by", "isolation"), [
    (["hour", "partition"], "read_uncommitted"), ([], "read_committed"), (["partition"], "read_committed")])
def test_partitioning_and_isolation_choices(world: World, partition_by: list[str], isolation: str) -> None:
    name = f"p{len(partition_by)}{isolation[5]}"
    sync = world.sync(name, partition_by=partition_by, isolation=isolation)
    assert sync.run_once().added_segments == len(world.plan_ids())
    assert [f.name for f in sync.table.spec().fields] == [
        {"hour": "timestamp_hour", "partition": "partition"}[p] for p in partition_by]
    rows, _ = table_rows(_result(world, name))
    if isolation == "read_committed":
        assert rows == world.truth
    else:  # the aborted transaction's records too
        assert rows == consumed(world.bootstrap, world.topic, world.remote_end(), "read_uncommitted")
        assert any(r[5] == (("txn", b"a"),) for r in rows)


def test_warehouse_on_the_object_store(world: World, seaweedfs: SeaweedFS,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The warehouse in S3 (SeaweedFS, the catalog's endpoint): a writer that dies after its data
    files leaves orphans there, listed; the next writer adds every segment once."""
    import rlm.tables.writer as writer
    from rlm.tables import orphan_files, read_ledger

    catalog = {"type": "sql", "uri": f"sqlite:///{world.tmp / 'iceberg' / 's3-catalog.db'}",
               "warehouse": f"s3://{seaweedfs.create_bucket('iceberg-wh')}/wh",
               "s3.endpoint": seaweedfs.endpoint_url, "s3.access-key-id": ACCESS_KEY,
               "s3.secret-access-key": SECRET_KEY, "s3.region": REGION}

    def die() -> None:
        raise KeyboardInterrupt("killed before the commit")

    monkeypatch.setattr(writer, "_hold_before_commit", die)
    with pytest.raises(KeyboardInterrupt):
        world.sync("s3", catalog=catalog).run_once()
    monkeypatch.undo()
    sync = world.sync("s3", catalog=catalog)
    assert sync.table.location().startswith("s3://")
    assert read_ledger(sync.table).segments == {}
    assert len(orphan_files(sync.table)) >= 1
    r = sync.run_once()
    ids = world.plan_ids()
    assert r.added_segments == len(ids)
    rows = sync.table.scan().to_arrow().sort_by([("offset", "ascending")])
    assert rows.column("offset").to_pylist() == [t[0] for t in world.truth]
    assert rows.column("value").to_pylist() == [t[4] for t in world.truth]


def test_a_topic_with_two_partitions(world: World) -> None:
    """Every partition's lineage segments, each partition's rows as its consumer read them."""
    from rlm.config import IcebergConfig
    from rlm.tables import IcebergSync

    topic = f"ice2-{uuid.uuid4().hex[:8]}"
    create_topic(world.bootstrap, topic, partitions=2)
    for p, codec in ((0, "lz4"), (1, "snappy")):
        _produce(world.bootstrap, topic, 2400, random.Random(p), f"p{p}", codec, partition=p)
    world.sidecar["topics"].append({"pattern": topic, "remote.storage.enable": True,
                                    "retention.ms": -1, "retention.bytes": -1})
    world.tier()
    wait_for("both partitions tiered", lambda: len(world.fetcher.topics().get(topic, [])) == 2, timeout=60)
    cfg = IcebergConfig.model_validate(world.iceberg("two", partition_by=["partition", "day"]))
    sync = IcebergSync(world.fetcher, load_catalog("rlm", **world.catalog), cfg, topic)
    r = sync.run_once()
    plans = {p: world.fetcher.plan(topic, p) for p in (0, 1)}
    assert r.added_segments == sum(len(plan.segments) for plan in plans.values())
    t = sync.table.scan().to_arrow()
    for p, plan in plans.items():
        got = t.filter(pc.equal(t.column("partition"), p)).sort_by([("offset", "ascending")])
        truth = consumed(world.bootstrap, topic, plan.log_end, partition=p)
        assert got.column("offset").to_pylist() == [x[0] for x in truth]
        assert got.column("key").to_pylist() == [x[3] for x in truth]
        assert got.column("value").to_pylist() == [x[4] for x in truth]
    assert sync.run_once().added_segments == 0


def test_more_segments_tiered_then_follow_adds_exactly_those(world: World) -> None:
    cfg = world.config("main")
    old = set(world.plan_ids())
    assert _result(world, "main")["segments"] == len(old)
    _produce(world.bootstrap, world.topic, 2500, random.Random(7), "more", "gzip")
    world.tier()
    wait_for("the reader sees the new segments", lambda: len(world.plan_ids()) > len(old), timeout=60)
    new = [i for i in world.plan_ids() if i not in old]
    world.truth = consumed(world.bootstrap, world.topic, world.remote_end())
    p = _rlm("iceberg", "--config", str(cfg), "--topic", world.topic, "--follow", "--json")
    try:
        wait_for("the follower added the new segments",
                 lambda: _result(world, "main")["segments"] == len(old) + len(new), timeout=120)
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    result = json.loads(out)
    assert result["added_segments"] == len(new)
    assert result["segments"] == len(old) + len(new)
    _check_equal(world, result, [*old, *new])


# ---- several topics in one table (iceberg.shared_tables) -------------------------------------

@pytest.fixture(scope="module")
def second(world: World) -> tuple[str, list[Row]]:
    """A second tiered topic (no transactions, lz4) and what its read_committed consumer read.
    Its partition 0 has offsets the first topic's partition 0 has too: a ledger that did not keep
    topics apart would take its segments as already in the table."""
    topic = f"iceshared-{uuid.uuid4().hex[:8]}"
    create_topic(world.bootstrap, topic)
    _produce(world.bootstrap, topic, 3600, random.Random(5), "b", "lz4")
    world.sidecar["topics"].append({"pattern": topic, "remote.storage.enable": True,
                                    "retention.ms": -1, "retention.bytes": -1})
    world.tier()
    wait_for("the second topic tiered", lambda: len(world.fetcher.topics().get(topic, [])) == 1, timeout=60)
    assert len(world.plan_ids(topic)) >= 2
    return topic, consumed(world.bootstrap, topic, world.remote_end(topic))


def _named(table: Any) -> dict[str, list[str]]:
    """Per topic, the segment ids its snapshots recorded (each snapshot names one topic)."""
    out: dict[str, list[str]] = {}
    for snap in table.snapshots():
        props = snap.summary.additional_properties
        if "rlm.segments" in props:
            out.setdefault(props["rlm.topic"], []).extend(s[1] for s in json.loads(props["rlm.segments"]))
    return out


def _check_shared(world: World, second: tuple[str, list[Row]], result: dict[str, Any]) -> None:
    """Each topic's rows in the table are, row for row, what its consumer read; each lineage
    segment is recorded once, by a snapshot of its own topic."""
    b_topic, b_truth = second
    a_truth = [r for r in world.truth if r[0] < world.remote_end()]
    table = load_catalog(result["catalog_name"], **result["catalog"]).load_table(result["table"])
    named = _named(table)
    for topic, truth in ((world.topic, a_truth), (b_topic, b_truth)):
        rows, seg_of_row = table_rows(result, topic)
        assert rows == truth, topic
        assert sorted(named[topic]) == sorted(world.plan_ids(topic)) and set(seg_of_row) <= set(named[topic])
    assert set(named) == {world.topic, b_topic}
    assert table.scan().to_arrow().num_rows == len(a_truth) + len(b_truth)


def test_two_topics_in_one_table(world: World, second: tuple[str, list[Row]]) -> None:
    """``shared_tables`` maps both topics (a name and a glob) to ``kafka.both``: A's writer adds
    A's segments, then ``rlm iceberg --topic B`` B's only; the table (partitioned by topic, then
    day) holds each topic's rows as its consumer read them; ``--json`` names the shared table and
    breaks it down per topic; reruns add nothing; the lag is per topic (``rlm status``)."""
    from rlm.commands.iceberg_maint import PassHook
    from rlm.commands.status import iceberg_lags, render_iceberg

    b_topic, b_truth = second
    a_ids, b_ids = world.plan_ids(), world.plan_ids(b_topic)
    a_rows = len([r for r in world.truth if r[0] < world.remote_end()])
    shared = {"shared_tables": [{"name": "both", "topics": [world.topic, "iceshared-*"]}]}
    cfg = world.config("own", **shared)
    a = world.sync("own", world.topic, **shared)  # in process, with the command's pass hook (lag)
    PassHook(load_config(cfg), world.fetcher, a, None)(r := a.run_once(), 1.0)
    assert (a.identifier, r.added_segments) == ("kafka.both", len(a_ids))
    rb = run_iceberg(cfg, b_topic)
    assert (rb["table"], rb["topic"], rb["added_segments"]) == ("kafka.both", b_topic, len(b_ids))
    assert (rb["segments"], rb["rows"]) == (len(a_ids) + len(b_ids), a_rows + len(b_truth))
    assert rb["topics"] == {world.topic: {"segments": len(a_ids), "rows": a_rows},
                            b_topic: {"segments": len(b_ids), "rows": len(b_truth)}}
    _check_shared(world, second, rb)
    table = load_catalog("rlm", **world.catalog).load_table("kafka.both")
    assert [f.name for f in table.spec().fields] == ["topic", "timestamp_day"]
    assert [f.source_id for f in table.sort_order().fields] == [3, 4, 5]  # topic, partition, offset
    snaps = len(table.snapshots())
    for topic in (world.topic, b_topic):
        assert world.sync("own", topic, **shared).run_once().added_segments == 0
    assert len(load_catalog("rlm", **world.catalog).load_table("kafka.both").snapshots()) == snaps
    work = load_config(cfg).work_dir  # what `rlm status` reads: a lag per topic of the table
    lags = {lag["topic"]: lag for lag in iceberg_lags(work) if lag["table"] == "kafka.both"}
    assert {t: (lag["segments"], lag["rows"], lag["segments_behind"]) for t, lag in lags.items()} == {
        world.topic: (len(a_ids), a_rows, 0), b_topic: (len(b_ids), len(b_truth), 0)}
    text = "\n".join(render_iceberg(list(lags.values()), int(time.time() * 1000)))
    assert f"kafka.both ({b_topic}): 0 segments / 0 offsets behind" in text


def test_two_topics_synced_at_once_into_one_table(world: World, second: tuple[str, list[Row]]) -> None:
    """A writer of A and two of B at once, a snapshot per segment, into one unpartitioned shared
    table (so its spec is identity on topic): their commits conflict (optimistic commit) and are
    retried on the new version; each segment of each topic lands once."""
    b_topic, _ = second
    shared = {"shared_tables": [{"name": "pair2", "topics": [world.topic, b_topic]}],
              "segments_per_commit": 1, "partition_by": []}
    results = run_at_once([world.sync("own", t, **shared) for t in (world.topic, b_topic, b_topic)])
    a_ids, b_ids = world.plan_ids(), world.plan_ids(b_topic)
    assert results[0].added_segments == len(a_ids)
    assert results[1].added_segments + results[2].added_segments == len(b_ids)
    result = {"catalog": world.catalog, "catalog_name": "rlm", "table": "kafka.pair2"}
    _check_shared(world, second, result)
    table = load_catalog("rlm", **world.catalog).load_table("kafka.pair2")
    assert len(table.snapshots()) == len(a_ids) + len(b_ids)  # one per segment, none twice
    assert [f.name for f in table.spec().fields] == ["topic"]


def test_expiry_and_compaction_of_a_shared_table(world: World, second: tuple[str, list[Row]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """In the shared table: A's log start moved past its first segment expires A's rows below it
    and none of B's (B has those offsets too); compaction rewrites each topic's small files as one
    file of that topic; rows, per-topic ledgers and answers unchanged; reruns add nothing."""
    from types import SimpleNamespace

    from rlm.tables import read_ledger
    from rlm.tables.compact import compact
    from rlm.tables.expire import expire_deleted

    b_topic, b_truth = second
    shared = {"shared_tables": [{"name": "pair2", "topics": [world.topic, b_topic]}],
              "segments_per_commit": 1, "partition_by": []}
    for t in (world.topic, b_topic):  # (no-ops after the previous test; this one stands alone)
        world.sync("own", t, **shared).run_once()
    catalog = load_catalog("rlm", **world.catalog)
    bound = world.fetcher.plan(world.topic, 0).segments[1].first
    assert any(r[0] < bound for r in b_truth)
    real = world.fetcher.log_start
    monkeypatch.setattr(world.fetcher, "log_start", lambda tp, *a: (
        SimpleNamespace(offset=bound) if tp.topic == world.topic else real(tp, *a)))
    a_truth = [r for r in world.truth if r[0] < world.remote_end()]
    r = expire_deleted(world.fetcher, catalog, "kafka.pair2", world.topic)
    assert r.below == {0: bound} and r.rows_removed == len([x for x in a_truth if x[0] < bound])
    assert expire_deleted(world.fetcher, catalog, "kafka.pair2", b_topic).below == {}
    assert expire_deleted(world.fetcher, catalog, "kafka.pair2", world.topic).below == {}  # idempotent
    monkeypatch.undo()
    result = {"catalog": world.catalog, "catalog_name": "rlm", "table": "kafka.pair2"}
    assert table_rows(result, world.topic)[0] == [x for x in a_truth if x[0] >= bound]
    assert table_rows(result, b_topic)[0] == b_truth

    table = catalog.load_table("kafka.pair2")
    ledgers = {t: read_ledger(table, t).segments for t in (world.topic, b_topic)}
    assert len({f.file.partition[0] for f in table.scan().plan_files()}) == 2
    c = compact(catalog, "kafka.pair2", orphan_min_age_s=3600)
    assert (c.partitions, c.files_written) == (2, 2)  # no time transform: every partition is closed
    table = catalog.load_table("kafka.pair2")
    files = [task.file for task in table.scan().plan_files()]
    assert sorted(f.partition[0] for f in files) == sorted([world.topic, b_topic])
    for f in files:  # one topic per file, sorted by (partition, offset)
        import pyarrow.parquet as pq

        t = pq.read_table(f.file_path.removeprefix("file://"), columns=["topic", "offset"])
        assert set(t.column("topic").to_pylist()) == {f.partition[0]}
        assert t.column("offset").to_pylist() == sorted(t.column("offset").to_pylist())
    assert {t: read_ledger(table, t).segments for t in ledgers} == ledgers
    assert table_rows(result, world.topic)[0] == [x for x in a_truth if x[0] >= bound]
    assert table_rows(result, b_topic)[0] == b_truth
    for t in (world.topic, b_topic):
        assert world.sync("own", t, **shared).run_once().added_segments == 0
