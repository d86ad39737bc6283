"""DeleteRecords is honoured by every face, and by a reader that has neither log dir nor broker.

A real broker: several 1 MiB segments are produced and tiered (``rlm run --once`` in process);
``DeleteRecords`` then moves the log start into the third segment; the daemon runs again (it
learns the bound from the broker, publishes it beside the segments and deletes the remote
segments wholly below it); the broker's own retention then deletes every tiered segment locally,
so its log start is a segment base again and only the published object remembers the bound.
What the broker served after ``DeleteRecords`` (a consumer's records, ListOffsets earliest and by
timestamp) is the reference every face must equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from fetcher import RemoteFetcher
from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.errors import OffsetOutOfRangeError, RemoteResourceNotFoundError, RemoteStorageIntegrityError
from rlm.log.partition import PartitionDir
from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentState
from rsm_plugins.log_start import OBJECT_NAME
from tests.daemon.helpers import create_topic, produce, set_topic_config, wait_for
from tests.fetcher_e2e.conftest import _watermarks, broker_offsets_for_times
from tests.services.kafka import KafkaCluster

pytestmark = pytest.mark.slow

Rec = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


@dataclass
class Deleted:
    topic: str
    bootstrap: str
    daemon_cfg: DaemonConfig
    reader: dict[str, Any]  # a reader's config: neither log dir nor broker
    tmp: Path
    log_start: int  # where DeleteRecords moved the broker's log start
    remote_end: int
    below: list[RemoteLogSegmentMetadata]  # remote segments wholly below the log start
    records: list[Rec]  # what the broker served from the log start on (before local deletion)
    list_offsets: dict[int, int | None]  # timestamp -> the broker's answer (before local deletion)
    broker_reader_log_start: int  # what a broker-only reader said before the daemon published
    dir_reader_log_start: int  # what a log-dir-only reader said before the daemon published

    def reader_cfg(self, name: str, **extra: Any) -> DaemonConfig:
        return load_config(None, **{**self.reader, "work_dir": str(self.tmp / name), **extra})


def _run_daemon(cfg: DaemonConfig) -> None:
    d = Daemon(cfg, once=True).start()
    try:
        assert d.run_once() == 0
    finally:
        d.stop()


def _consume(bs: str, topic: str, until: int) -> list[Rec]:
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"ls-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[Rec] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error() is None:
                    out.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
            if out and out[-1][0] >= until - 1:
                return out
        raise AssertionError(f"consumer did not reach offset {until}")
    finally:
        c.close()


@pytest.fixture(scope="module")
def deleted(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deleted]:
    tmp = tmp_path_factory.mktemp("log-start")
    bs = kafka.bootstrap
    topic = f"log-start-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    produce(bs, topic, 4500, size=1000)  # ~4 MiB: four rolled 1 MiB segments and the active one
    pdir = kafka.log_dir / f"{topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir).segments) >= 5)
    work = tmp / "daemon"
    sidecar: dict[str, Any] = {
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(work),
        "bootstrap_servers": bs,
        "topics": [
            {"pattern": topic, "remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1}
        ],
        "task_interval_ms": 200,
        "http": {"enabled": False},
    }
    daemon_cfg = load_config(None, **sidecar)
    _run_daemon(daemon_cfg)
    reader = {
        "work_dir": str(tmp / "reader"),
        "storage": {"plugin": "local", "config": {"root": str(work / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(work / "metadata")}},
        "read": {"fetch_max_wait_ms": 30_000},
    }
    with RemoteFetcher.from_config(load_config(None, **reader)) as f:
        segs = [link.metadata for link in f.plan(topic, 0).segments]
        remote_end = f.plan(topic, 0).log_end
    assert len(segs) >= 4 and segs[0].start_offset == 0
    log_start = segs[2].start_offset + 137  # inside the third segment
    admin = AdminClient({"bootstrap.servers": bs})
    for fut in admin.delete_records([TopicPartition(topic, 0, log_start)]).values():
        fut.result(timeout=30)
    assert _watermarks(bs, topic)[0] == log_start
    # until the broker removed the segments wholly below the new log start, its timestamp lookup
    # can land in one of them and answer "none": record its answers once they are gone
    wait_for(
        "local segments below the log start deleted",
        lambda: PartitionDir(pdir).segments[0].base_offset == segs[2].start_offset,
        timeout=60,
    )
    _, hw = _watermarks(bs, topic)
    records = _consume(bs, topic, hw)
    stamps = sorted({r[3] for r in records})
    all_stamps = [
        segs[0].max_timestamp_ms - 10**6,
        segs[1].max_timestamp_ms,
        *stamps[:: max(1, len(stamps) // 100)],
        # a fast producer gives few distinct timestamps: a stamp + 1 is answered by the next one
        *[ts + 1 for ts in stamps[:: max(1, len(stamps) // 100)]],
    ]
    answers = broker_offsets_for_times(bs, topic, sorted(set(all_stamps)))

    # a reader with only the broker: the broker's log start lies inside a remote segment, which
    # local retention cannot explain, so it counts before the daemon has published anything
    with RemoteFetcher.from_config(
        load_config(None, **{**reader, "work_dir": str(tmp / "broker-reader"), "bootstrap_servers": bs})
    ) as f:
        broker_reader = f.plan(topic, 0).log_start  # nothing published yet: the broker's answer
    # a reader with only the log dir: the broker rewrites log-start-offset-checkpoint every
    # log.flush.start.offset.checkpoint.interval.ms (60 s in Kafka, 1 s in the test brokers); its
    # entry lies above the first local segment
    checkpoint = kafka.log_dir / "log-start-offset-checkpoint"
    wait_for("log start checkpointed", lambda: f" {log_start}\n" in checkpoint.read_text(), timeout=90)
    dir_cfg = load_config(
        None, **{**reader, "work_dir": str(tmp / "dir-reader"), "log_dirs": [str(kafka.log_dir)]}
    )
    with RemoteFetcher.from_config(dir_cfg) as f:
        dir_reader = f.plan(topic, 0).log_start
    _run_daemon(daemon_cfg)  # learns, publishes, deletes below
    # the broker's own retention deletes every tiered segment: its log start is a segment base again
    set_topic_config(bs, topic, **{"retention.bytes": "1"})
    wait_for(
        "local retention deleted the tiered segments",
        lambda: _watermarks(bs, topic)[0] >= remote_end,
        timeout=90,
    )
    config_path = tmp / "reader.yaml"
    config_path.write_text(yaml.safe_dump(reader))
    yield Deleted(
        topic,
        bs,
        daemon_cfg,
        reader,
        tmp,
        log_start,
        remote_end,
        [md for md in segs if md.end_offset < log_start],
        records,
        answers,
        broker_reader,
        dir_reader,
    )


@pytest.fixture(scope="module")
def bare(deleted: Deleted) -> Iterator[RemoteFetcher]:
    """A reader with neither log dir nor broker: only storage and metadata."""
    with RemoteFetcher.from_config(deleted.reader_cfg("bare")) as f:
        yield f


def test_broker_only_reader_honours_delete_records(deleted: Deleted) -> None:
    assert deleted.broker_reader_log_start == deleted.log_start


def test_log_dir_only_reader_honours_delete_records(deleted: Deleted) -> None:
    assert deleted.dir_reader_log_start == deleted.log_start


def test_spark_plan_starts_at_log_start(deleted: Deleted) -> None:
    """The Spark source's driver-side plan (also ``rlm backfill``'s): earliest is the log start,
    and an explicit start below it is data loss, as Spark's Kafka source says for deleted offsets."""
    from fetcher.spark.options import parse_options
    from fetcher.spark.planner import DataLossError, PushedBounds, plan_tasks

    opts = {
        "subscribe": deleted.topic,
        "rlm.config": str(deleted.tmp / "reader.yaml"),
        "rlm.workdir": str(deleted.tmp / "spark"),
    }
    tasks = plan_tasks(parse_options(opts), PushedBounds())
    assert tasks[0].start == deleted.log_start
    read = sum(r.rng.end - r.rng.start for t in tasks for r in t.reads)
    assert read == deleted.remote_end - deleted.log_start
    below = json.dumps({deleted.topic: {"0": deleted.log_start - 1}})
    with pytest.raises(DataLossError):
        plan_tasks(parse_options({**opts, "startingoffsets": below}), PushedBounds())


def test_segments_below_log_start_deleted(deleted: Deleted, bare: RemoteFetcher) -> None:
    assert len(deleted.below) == 2
    states = {
        md.remote_log_segment_id: md.state
        for md in bare.rlmm.list_remote_log_segments(
            deleted.below[0].remote_log_segment_id.topic_id_partition
        )
    }
    for md in deleted.below:
        # the metadata store forgets a segment once it is DELETE_SEGMENT_FINISHED
        assert states.get(md.remote_log_segment_id) in (None, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
        with pytest.raises(RemoteResourceNotFoundError):
            bare.rsm.fetch_log_segment(md, 0).close()
    kept = [s for s, st in states.items() if st is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    assert len(kept) >= 2


def test_published_object_bounds_a_bare_reader(deleted: Deleted, bare: RemoteFetcher) -> None:
    ls = bare.log_start(deleted.topic, 0)
    assert (ls.offset, ls.published, ls.log_dir, ls.broker) == (
        deleted.log_start,
        deleted.log_start,
        None,
        None,
    )
    plan = bare.plan(deleted.topic, 0)
    assert (plan.log_start, plan.log_end) == (deleted.log_start, deleted.remote_end)
    with pytest.raises(OffsetOutOfRangeError) as e:
        bare.fetch(deleted.topic, 0, deleted.log_start - 1)
    assert (e.value.log_start, e.value.log_end) == (deleted.log_start, deleted.remote_end)
    with pytest.raises(OffsetOutOfRangeError):
        bare.fetch(deleted.topic, 0, deleted.below[0].start_offset)


def test_scan_equals_broker(deleted: Deleted, bare: RemoteFetcher) -> None:
    rows: list[Rec] = []
    for b in bare.scan(deleted.topic, 0):
        d = b.to_pydict()
        rows += [
            (o, k, v, int(t.timestamp() * 1000) if hasattr(t, "timestamp") else int(t))
            for o, k, v, t in zip(d["offset"], d["key"], d["value"], d["timestamp"], strict=True)
        ]
    want = [r for r in deleted.records if r[0] < deleted.remote_end]
    assert [r[:3] for r in rows] == [r[:3] for r in want]
    assert rows[0][0] == deleted.log_start


def test_offsets_equal_broker(deleted: Deleted, bare: RemoteFetcher) -> None:
    earliest = bare.offset_for_timestamp(deleted.topic, 0, -2)
    assert earliest is not None and earliest.offset == deleted.log_start
    compared, wrong = 0, []
    for ts, want in deleted.list_offsets.items():
        if want is None or want >= deleted.remote_end:
            continue
        got = bare.offset_for_timestamp(deleted.topic, 0, ts)
        if got is None or got.offset != want:
            wrong.append((ts, want, got))
        compared += 1
    assert not wrong, (wrong, deleted.log_start, deleted.remote_end)
    assert compared >= 3, deleted.list_offsets  # a stamp, its + 1 and the next (few distinct stamps)
    assert deleted.list_offsets[min(deleted.list_offsets)] == deleted.log_start


def _cli(deleted: Deleted, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlm.cli", *args, "--config", str(deleted.tmp / "reader.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli(deleted: Deleted) -> None:
    res = _cli(deleted, "fetch", "-t", deleted.topic, "-p", "0", "--offset", str(deleted.log_start - 1))
    assert res.returncode == 1 and str(deleted.log_start) in res.stderr, res.stderr
    res = _cli(
        deleted,
        "fetch",
        "-t",
        deleted.topic,
        "-p",
        "0",
        "--offset",
        str(deleted.log_start),
        "--until-offset",
        str(deleted.log_start + 5),
    )
    assert res.returncode == 0, res.stderr
    assert [json.loads(line)["offset"] for line in res.stdout.splitlines()] == list(
        range(deleted.log_start, deleted.log_start + 5)
    )
    res = _cli(deleted, "offsets", "-t", deleted.topic, "--timestamp", "earliest", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["offset"] == deleted.log_start, res.stdout
    ts = min(deleted.list_offsets)
    res = _cli(deleted, "offsets", "-t", deleted.topic, "--timestamp", str(ts), "--json")
    assert json.loads(res.stdout)["offset"] == deleted.list_offsets[ts] == deleted.log_start


def test_http(deleted: Deleted) -> None:
    from fetcher.http.server import HttpApiServer

    server = HttpApiServer.from_config(deleted.reader_cfg("http")).start()
    base = f"http://127.0.0.1:{server.port}/v1/topics/{deleted.topic}"
    try:
        r = requests.get(f"{base}/partitions/0/records", params={"offset": deleted.log_start - 1}, timeout=60)
        assert r.status_code == 416, r.text
        assert r.json()["log_start_offset"] == deleted.log_start
        r = requests.get(f"{base}/partitions/0/records", timeout=60)  # default: from the log start
        assert r.status_code == 200, r.text
        offsets = [json.loads(line)["offset"] for line in r.text.splitlines()]
        assert offsets[0] == deleted.log_start and r.headers["X-Log-Start-Offset"] == str(deleted.log_start)
        r = requests.get(f"{base}/offsets", params={"timestamp": "earliest"}, timeout=60)
        assert r.json()["partitions"][0]["offset"] == deleted.log_start, r.text
        r = requests.get(f"{base}/partitions/0/segments", timeout=60)
        assert r.json()["log_start_offset"] == deleted.log_start
    finally:
        server.stop()


def test_kafka_endpoint(deleted: Deleted, bare: RemoteFetcher) -> None:
    from rlm.commands.kafka_serve import start_kafka_listener

    endpoint = start_kafka_listener(bare, "127.0.0.1", 0, state_dir=deleted.tmp / "endpoint")
    try:
        c = Consumer(
            {
                "bootstrap.servers": endpoint.bootstrap,
                "group.id": "ls",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            lo, hi = c.get_watermark_offsets(TopicPartition(deleted.topic, 0), timeout=30)
            assert (lo, hi) == (deleted.log_start, deleted.remote_end)
            # below the log start: out of range, so the client resets to earliest = the log start
            c.assign([TopicPartition(deleted.topic, 0, deleted.below[0].start_offset)])
            got: list[int] = []
            deadline = time.monotonic() + 60
            while len(got) < 50 and time.monotonic() < deadline:
                got += [m.offset() for m in c.consume(100, timeout=1) if m.error() is None]
            assert got[:50] == list(range(deleted.log_start, deleted.log_start + 50))
        finally:
            c.close()
    finally:
        endpoint.close()


def test_status_shows_log_start(deleted: Deleted) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "rlm.cli", "status", "--work-dir", str(deleted.daemon_cfg.work_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    doc = json.loads(res.stdout)
    assert doc["partitions"][f"{deleted.topic}-0"]["log_start"] == deleted.log_start
    table = subprocess.run(
        [sys.executable, "-m", "rlm.cli", "status", "--work-dir", str(deleted.daemon_cfg.work_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    head = next(ln for ln in table.splitlines() if ln.startswith("PARTITION"))
    row = next(ln for ln in table.splitlines() if ln.startswith(f"{deleted.topic}-0"))
    assert "LOG START" in head and str(deleted.log_start) in row.split()


def test_corrupt_published_object_is_an_error_and_the_daemon_repairs_it(deleted: Deleted) -> None:
    """A reader cannot know the bound a corrupt object held: it refuses rather than risk serving
    deleted records; the daemon's next run writes the object again."""
    tp = deleted.below[0].remote_log_segment_id.topic_id_partition
    obj = (
        Path(deleted.daemon_cfg.work_dir)
        / "remote"
        / f"{tp.topic}-{tp.partition}-{tp.topic_id.text}"
        / OBJECT_NAME
    )
    assert obj.is_file()
    good = obj.read_bytes()
    obj.write_bytes(b"{not json")
    with (
        RemoteFetcher.from_config(deleted.reader_cfg("corrupt")) as f,
        pytest.raises(RemoteStorageIntegrityError),
    ):
        f.fetch(deleted.topic, 0, deleted.log_start)
    _run_daemon(deleted.daemon_cfg)  # a new process: it reads the object, finds it corrupt, rewrites it
    assert json.loads(obj.read_bytes())["log_start_offset"] == json.loads(good)["log_start_offset"]
    with RemoteFetcher.from_config(deleted.reader_cfg("repaired")) as f:
        assert f.log_start(deleted.topic, 0).offset == deleted.log_start
