"""Every read face equals what the broker served, on one workload with every edge at once.

A real broker writes one partition: five codecs with explicit (partly backwards) timestamps;
a committed and an aborted transaction interleaved until the segment rolls inside both, whose
COMMIT and ABORT markers land in the first untiered segment; plain records after them; and a
transaction left open (it holds the broker's LSO inside that untiered segment). ``rlm run
--once`` tiers every rolled segment; ``DeleteRecords`` then moves the log start inside the
second segment; the daemon runs again (learns the bound, publishes it, deletes the remote segment
wholly below it); the broker's retention deletes every tiered segment locally.

What the broker served after ``DeleteRecords`` and before the local deletion — a
confluent-kafka consumer's records at both isolation levels, and ListOffsets earliest and by
timestamp — is the reference. Each face must return exactly that for the tiered range (and, in
merged mode, for the whole partition), and nothing below the log start:
the read core, ``rlm fetch`` and ``rlm offsets`` (CLI), the HTTP API, the Kafka endpoint
(standalone and merged mode, confluent-kafka at both levels), Spark (both levels) and
``rlm backfill``.
"""

from __future__ import annotations

import base64
import json
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.commands.kafka_serve import start_kafka_listener
from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.errors import OffsetOutOfRangeError
from rlm.log.partition import PartitionDir
from tests.daemon.helpers import create_topic, set_topic_config, transactional_producer, wait_for
from tests.fetcher_e2e.conftest import (
    _watermarks,
    broker_offsets_for_times,
    lso_of,
)
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
Row = tuple[int, bytes | None, bytes | None]  # offset, key, value
_GIVE_UP_S = 120  # only so a broken face fails instead of hanging


@dataclass
class Workload:
    topic: str
    bootstrap: str
    tmp: Path
    reader: dict[str, Any]  # the faces' config: storage, metadata, the broker and its log dir
    config_path: Path
    log_start: int  # where DeleteRecords moved the broker's log start
    remote_end: int  # first offset not tiered (the first untiered segment's base)
    lso: int  # the broker's LSO (the open transaction's first offset)
    high_watermark: int
    uncommitted: list[Row]  # what the broker served from the log start, read_uncommitted
    committed: list[Row]  # the same, read_committed
    timestamps: dict[int, int]  # record offset -> timestamp (read_uncommitted records)
    list_offsets: dict[int, int | None]  # timestamp -> the broker's answer
    open_txn: Producer

    def cfg(self, name: str, **extra: Any) -> DaemonConfig:
        return load_config(None, **{**self.reader, "work_dir": str(self.tmp / name), **extra})

    def tiered(self, rows: list[Row]) -> list[Row]:
        return [r for r in rows if r[0] < self.remote_end]


def _consume(bs: str, topic: str, isolation: str, until: int) -> list[tuple[Row, int]]:
    """Every record a consumer reads from the earliest offset until its position reaches ``until``."""
    c = Consumer({"bootstrap.servers": bs, "group.id": f"every-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    out: list[tuple[Row, int]] = []
    deadline = time.monotonic() + _GIVE_UP_S
    try:
        while time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error() is None:
                    out.append(((m.offset(), m.key(), m.value()), m.timestamp()[1]))
            if c.position([TopicPartition(topic, 0)])[0].offset >= until:
                return out
        raise AssertionError(f"a {isolation} consumer of {bs} did not reach offset {until}")
    finally:
        c.close()


def _produce(p: Producer, topic: str, tag: str, n: int, rnd: random.Random, t0: int | None = None) -> None:
    for i in range(n):
        kw: dict[str, Any] = {}
        if t0 is not None:  # explicit CreateTime, every 13th a step backwards
            kw["timestamp"] = t0 + 10 * i - (35 if i % 13 == 12 else 0)
        headers = [("h", f"{tag}{i}".encode()), ("nil", None)] if i % 9 == 0 else None
        p.produce(topic, key=None if i % 17 == 0 else f"{tag}{i}".encode(),
                  value=rnd.randbytes(rnd.randint(150, 700)), headers=headers, partition=0, **kw)
        if i % 200 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _run_daemon(cfg: DaemonConfig) -> None:
    d = Daemon(cfg, once=True).start()
    try:
        assert d.run_once() == 0
    finally:
        d.stop()


@pytest.fixture(scope="module")
def workload(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workload]:
    tmp = tmp_path_factory.mktemp("every-face")
    bs = kafka.bootstrap
    topic = f"every-face-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)  # 1 MiB segments
    pdir = kafka.log_dir / f"{topic}-0"
    rnd = random.Random(21)
    t0 = int(time.time() * 1000) - 3_600_000
    for n, codec in enumerate(CODECS):  # ~1.6 MiB: the first segment rolls inside this block
        p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5,
                      "compression.type": codec})
        _produce(p, topic, codec, 750, rnd, t0 + n * 10_000)
    assert len(PartitionDir(pdir).segments) >= 2
    # a committed and an aborted transaction, interleaved, until the segment rolls inside both
    committed = transactional_producer(bs, f"{topic}-c")
    aborted = transactional_producer(bs, f"{topic}-a")
    committed.begin_transaction()
    aborted.begin_transaction()
    rolled = len(PartitionDir(pdir).segments)
    for _ in range(200):
        _produce(committed, topic, "c", 40, rnd)
        _produce(aborted, topic, "a", 40, rnd)
        if len(PartitionDir(pdir).segments) > rolled:
            break
    assert len(PartitionDir(pdir).segments) > rolled, "the segment did not roll inside the transactions"
    _produce(committed, topic, "c", 10, rnd)  # more of both in the new (first untiered) segment
    _produce(aborted, topic, "a", 10, rnd)
    committed.commit_transaction(30)
    aborted.abort_transaction(30)
    _produce(Producer({"bootstrap.servers": bs, "enable.idempotence": True}), topic, "post", 60, rnd)
    # left open for the module: a long transaction timeout so the coordinator does not abort it
    open_txn = Producer({"bootstrap.servers": bs, "transactional.id": f"{topic}-open",
                         "transaction.timeout.ms": 900_000})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    _produce(open_txn, topic, "open", 15, rnd)
    _produce(Producer({"bootstrap.servers": bs, "enable.idempotence": True}), topic, "tail", 20, rnd)
    segments = PartitionDir(pdir).segments
    remote_end = segments[-1].base_offset  # the active segment holds the markers and the open txn
    lso = lso_of(bs, topic)
    assert remote_end < lso < _watermarks(bs, topic)[1]

    work = tmp / "daemon"
    storage = {"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}}
    metadata = {"manager": "file", "config": {"dir": str(tmp / "metadata")}}
    daemon = load_config(
        None, log_dirs=[str(kafka.log_dir)], work_dir=str(work), bootstrap_servers=bs, storage=storage,
        metadata=metadata, http={"enabled": False},
        topics=[{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1}],
    )
    _run_daemon(daemon)

    # DeleteRecords inside the second segment
    log_start = segments[1].base_offset + 41
    admin = AdminClient({"bootstrap.servers": bs})
    for fut in admin.delete_records([TopicPartition(topic, 0, log_start)]).values():
        fut.result(timeout=30)
    wait_for("the broker deleted the segment below the log start",
             lambda: PartitionDir(pdir).segments[0].base_offset == segments[1].base_offset, timeout=60)
    _, hw = _watermarks(bs, topic)
    unc = _consume(bs, topic, "read_uncommitted", hw)
    com = [r for r, _ts in _consume(bs, topic, "read_committed", lso)]
    assert unc[0][0][0] == log_start and com[0][0] >= log_start
    stamps = {r[0]: ts for r, ts in unc}
    probe = sorted({t0 - 1, *rnd.sample(sorted(set(stamps.values())), 40), max(stamps.values()) + 1})
    answers = broker_offsets_for_times(bs, topic, probe)
    assert answers[t0 - 1] == log_start

    _run_daemon(daemon)  # learns the log start, publishes it, deletes the remote segment below it
    set_topic_config(bs, topic, **{"retention.bytes": "1"})  # local retention deletes what is tiered
    wait_for("local retention deleted the tiered segments",
             lambda: _watermarks(bs, topic)[0] >= remote_end, timeout=90)

    reader = {
        "log_dirs": [str(kafka.log_dir)],  # the frontier's markers are in the broker's log dir
        "bootstrap_servers": bs,
        "work_dir": str(tmp / "reader"),
        "storage": storage,
        "metadata": metadata,
        "read": {"fetch_max_wait_ms": 30_000},
        "http": {"enabled": False},
    }
    config_path = tmp / "reader.yaml"
    config_path.write_text(yaml.safe_dump(reader))
    w = Workload(topic, bs, tmp, reader, config_path, log_start, remote_end, lso, hw,
                 [r for r, _ts in unc], com, stamps, answers, open_txn)
    # the workload has what the faces must get right
    tiered_com = w.tiered(com)
    assert any(k is not None and k.startswith(b"c") for _o, k, _v in tiered_com), "no frontier commit"
    assert any(k is not None and k.startswith(b"a") for _o, k, _v in w.tiered(w.uncommitted))
    assert not any(k is not None and k.startswith(b"a") for _o, k, _v in com)
    try:
        yield w
    finally:
        open_txn.abort_transaction(30)


@pytest.fixture(scope="module")
def core(workload: Workload) -> Iterator[RemoteFetcher]:
    with RemoteFetcher.from_config(workload.cfg("core")) as f:
        yield f


def _scan(f: RemoteFetcher, topic: str, level: str) -> list[Row]:
    tab = pa.Table.from_batches(list(f.scan(topic, 0, isolation=level)))
    if tab.num_rows == 0:
        return []
    return list(zip(*(tab.column(n).to_pylist() for n in ("offset", "key", "value")), strict=True))


def test_core(workload: Workload, core: RemoteFetcher) -> None:
    plan = core.plan(workload.topic, 0)
    assert (plan.log_start, plan.log_end) == (workload.log_start, workload.remote_end)
    assert core.committed_bound(workload.topic, 0).stable_offset == workload.remote_end
    assert _scan(core, workload.topic, "read_uncommitted") == workload.tiered(workload.uncommitted)
    assert _scan(core, workload.topic, "read_committed") == workload.tiered(workload.committed)
    with pytest.raises(OffsetOutOfRangeError):
        core.fetch(workload.topic, 0, workload.log_start - 1)
    wrong = []
    for ts, want in workload.list_offsets.items():
        got = core.offset_for_timestamp(workload.topic, 0, ts)  # past the remote end: the broker's
        if (got.offset if got is not None else None) != want:
            wrong.append((ts, want, got))
    assert not wrong
    earliest = core.offset_for_timestamp(workload.topic, 0, -2)
    assert earliest is not None and earliest.offset == workload.log_start


def _decode(line: str) -> Row:
    doc = json.loads(line)
    k, v = doc["key"], doc["value"]
    return (doc["offset"], None if k is None else base64.b64decode(k),
            None if v is None else base64.b64decode(v))


def _cli(w: Workload, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlm.cli", *args, "--config", str(w.config_path)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("level", ["read_uncommitted", "read_committed"])
def test_cli_fetch(workload: Workload, level: str) -> None:
    w = workload
    res = _cli(w, "fetch", "-t", w.topic, "--offset", str(w.log_start), "--until-offset",
               str(w.remote_end), "--isolation", level)
    assert res.returncode == 0, res.stderr
    want = w.tiered(w.uncommitted if level == "read_uncommitted" else w.committed)
    assert [_decode(line) for line in res.stdout.splitlines()] == want
    below = _cli(w, "fetch", "-t", w.topic, "--offset", str(w.log_start - 1), "--count", "1")
    assert below.returncode == 1 and str(w.log_start) in below.stderr, below.stderr


def test_cli_offsets(workload: Workload) -> None:
    w = workload
    res = _cli(w, "offsets", "-t", w.topic, "--timestamp", "earliest", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["offset"] == w.log_start, res.stdout + res.stderr
    inside = [(ts, o) for ts, o in w.list_offsets.items() if o is not None and o < w.remote_end]
    for ts, want in [inside[0], inside[len(inside) // 2], inside[-1]]:
        res = _cli(w, "offsets", "-t", w.topic, "--timestamp", str(ts), "--json")
        assert res.returncode == 0 and json.loads(res.stdout)["offset"] == want, (ts, res.stdout, res.stderr)


@pytest.mark.parametrize("level", ["read_uncommitted", "read_committed"])
def test_http(workload: Workload, level: str) -> None:
    from fetcher.http.server import HttpApiServer

    w = workload
    server = HttpApiServer.from_config(w.cfg(f"http-{level}")).start()
    base = f"http://127.0.0.1:{server.port}/v1/topics/{w.topic}"
    try:
        r = requests.get(f"{base}/partitions/0/records", params={"offset": w.log_start - 1}, timeout=60)
        assert r.status_code == 416 and r.json()["log_start_offset"] == w.log_start, r.text
        got: list[Row] = []
        offset = w.log_start
        while offset < w.remote_end:
            r = requests.get(f"{base}/partitions/0/records", timeout=60,
                             params={"offset": offset, "isolation": level, "max_bytes": 256 * 1024})
            assert r.status_code == 200, r.text
            got += [_decode(line) for line in r.text.splitlines()]
            nxt = int(r.headers["X-Next-Offset"])
            assert nxt > offset, (offset, r.headers)
            offset = nxt
        want = w.tiered(w.uncommitted if level == "read_uncommitted" else w.committed)
        assert [g for g in got if g[0] < w.remote_end] == want
        ts = min(w.list_offsets)
        r = requests.get(f"{base}/offsets", params={"timestamp": str(ts)}, timeout=60)
        assert r.json()["partitions"][0]["offset"] == w.list_offsets[ts] == w.log_start, r.text
    finally:
        server.stop()


def _endpoint_rows(bootstrap: str, topic: str, level: str, until: int) -> list[Row]:
    """A confluent-kafka consumer through an endpoint: every record below ``until``, once, in order."""
    got = [r for r, _ts in _consume(bootstrap, topic, level, until)]
    return [r for r in got if r[0] < until]


@pytest.mark.parametrize("level", ["read_uncommitted", "read_committed"])
def test_kafka_endpoint(workload: Workload, core: RemoteFetcher, level: str) -> None:
    w = workload
    endpoint = start_kafka_listener(core, "127.0.0.1", 0, state_dir=w.tmp / f"endpoint-{level}")
    try:
        want = w.tiered(w.uncommitted if level == "read_uncommitted" else w.committed)
        assert _endpoint_rows(endpoint.bootstrap, w.topic, level, w.remote_end) == want
        c = Consumer({"bootstrap.servers": endpoint.bootstrap, "group.id": "every-oft"})
        try:
            lo, _hi = c.get_watermark_offsets(TopicPartition(w.topic, 0), timeout=30)
            assert lo == w.log_start
            inside = [ts for ts, o in w.list_offsets.items() if o is not None and o < w.remote_end]
            for ts in inside[::4]:
                got = c.offsets_for_times([TopicPartition(w.topic, 0, ts)], timeout=30)[0]
                assert got.offset == w.list_offsets[ts], ts
        finally:
            c.close()
    finally:
        endpoint.close()


@pytest.mark.parametrize("level", ["read_uncommitted", "read_committed"])
def test_kafka_endpoint_merged(workload: Workload, core: RemoteFetcher, level: str) -> None:
    """Merged mode: the whole partition, tiered history then the broker's tail, equals the broker."""
    w = workload
    endpoint = EndpointThread(core, ListenerSettings(port=0, merged=True), w.tmp / f"merged-{level}")
    try:
        if level == "read_uncommitted":
            got = _endpoint_rows(endpoint.bootstrap, w.topic, level, w.high_watermark)
            assert got == w.uncommitted
        else:
            got = _endpoint_rows(endpoint.bootstrap, w.topic, level, w.lso)
            assert got == w.committed
    finally:
        endpoint.close()


@pytest.mark.parametrize("level", ["read_uncommitted", "read_committed"])
def test_spark(workload: Workload, spark: Any, level: str) -> None:
    import fetcher.spark

    w = workload
    fetcher.spark.register(spark)
    rows = (spark.read.format("kafka-tiered").option("rlm.config", str(w.config_path))
            .option("rlm.workdir", str(w.tmp / f"spark-{level}")).option("subscribe", w.topic)
            .option("kafka.isolation.level", level).option("rlm.splitBytes", str(256 * 1024))
            .load().select("offset", "key", "value").orderBy("offset").collect())
    got = [(r.offset, None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value))
           for r in rows]
    assert got == w.tiered(w.uncommitted if level == "read_uncommitted" else w.committed)


def test_backfill(workload: Workload, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from rlm.cli import build_parser
    from rlm.commands.backfill import backfill

    w = workload
    stamps = [w.timestamps[o] for o, _k, _v in w.tiered(w.uncommitted)]
    out = w.tmp / "backfill"
    args = build_parser().parse_args([
        "backfill", "--config", str(w.config_path), "--topic", w.topic, "--from", str(min(stamps)),
        "--to", str(max(stamps) + 1), "--output", str(out)])
    assert backfill(args, spark) == 0
    capsys.readouterr()
    back = spark.read.parquet(str(out))
    got = sorted((r.offset, r.value) for r in back.select("offset", "value").collect())
    assert got == [(o, v) for o, _k, v in w.tiered(w.committed)]
    assert min(o for o, _v in got) >= w.log_start
