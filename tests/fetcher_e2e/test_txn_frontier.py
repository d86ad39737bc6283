"""read_committed at the tiering frontier, against a real broker's own answers.

Two transactions start in a segment that gets tiered and end (one COMMIT, one ABORT) in the next,
still local, segment; a third transaction is left open. The broker serves the committed one's
records and hides the aborted one's. The read core must do the same from remote storage when it
knows the broker's log dir (the markers are there), and must stop at the remote LSO and say so
when it does not.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fetcher import RemoteFetcher
from fetcher.fetch import IsolationLevel
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.commands.kafka_serve import start_kafka_listener
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from tests.daemon.helpers import create_topic, produce, set_topic_config, transactional_producer, wait_for
from tests.fetcher_e2e.conftest import _watermarks, consume_all, lso_of
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _config(kafka: KafkaCluster, tmp: Path, topic: str, *, log_dirs: bool, work: str,
            broker: bool = True) -> Any:
    return load_config(
        None,
        log_dirs=[str(kafka.log_dir)] if log_dirs else [],
        work_dir=str(tmp / work),
        bootstrap_servers=kafka.bootstrap if broker else None,
        storage={"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
        metadata={"manager": "file", "config": {"dir": str(tmp / "metadata")}},
        topics=[{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1}],
        http={"enabled": False},
    )


def _txn_records(p: Producer, topic: str, tag: str, n: int) -> None:
    for i in range(n):
        p.produce(topic, key=f"{tag}{i}".encode(), value=tag.encode() * 100, partition=0)
    p.flush(30)


def _rows(f: RemoteFetcher, topic: str, level: str) -> list[tuple[int, bytes | None, bytes | None]]:
    tab = pa.Table.from_batches(list(f.scan(topic, 0, isolation=level)))
    if tab.num_rows == 0:
        return []
    return list(zip(*(tab.column(n).to_pylist() for n in ("offset", "key", "value")), strict=True))


def _fetched(f: RemoteFetcher, topic: str, start: int, end: int) -> list[int]:
    """Offsets of every record the fetch path returns read_committed (aborted dropped) below ``end``."""
    from rlm.log.records import ControlRecord, iter_records

    out: list[int] = []
    offset = start
    while offset < end:
        r = f.fetch(topic, 0, offset, isolation=IsolationLevel.READ_COMMITTED, drop_aborted=True)
        if r.next_offset <= offset:
            return out
        out += [rec.offset for _h, rec in iter_records(r.records)
                if not isinstance(rec, ControlRecord) and rec.offset >= offset]
        offset = r.next_offset
    return out


Row = tuple[int, bytes | None, bytes | None]


def _consumed(bootstrap: str, topic: str, isolation: str, end: int) -> list[Row]:
    """What a confluent-kafka consumer reads from ``bootstrap`` until its position reaches ``end``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[Row] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                if m.error() is None and m.offset() < end:  # merged mode goes on from the broker
                    out.append((m.offset(), m.key(), m.value()))
            if c.position([TopicPartition(topic, 0)])[0].offset >= end:
                return out
        raise AssertionError(f"the consumer did not reach offset {end}: {out[-1:]}")
    finally:
        c.close()


def test_read_committed_equals_the_broker_at_the_frontier(kafka: KafkaCluster, tmp_path: Path) -> None:
    bs = kafka.bootstrap
    topic = f"frontier-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    produce(bs, topic, 3000, size=300)  # ~0.9 MiB of plain records
    committed = transactional_producer(bs, f"{topic}-c")
    aborted = transactional_producer(bs, f"{topic}-a")
    committed.begin_transaction()
    aborted.begin_transaction()
    pdir = kafka.log_dir / f"{topic}-0"
    for _ in range(40):  # interleaved, until the segment rolls in the middle of both transactions
        _txn_records(committed, topic, "c", 20)
        _txn_records(aborted, topic, "a", 20)
        if len(PartitionDir(pdir).segments) >= 2:
            break
    assert len(PartitionDir(pdir).segments) >= 2, "the segment did not roll inside the transactions"
    _txn_records(committed, topic, "c", 20)
    _txn_records(aborted, topic, "a", 20)
    committed.commit_transaction(30)
    aborted.abort_transaction(30)
    produce(bs, topic, 50, size=300)
    left_open = transactional_producer(bs, f"{topic}-o")
    left_open.begin_transaction()
    _txn_records(left_open, topic, "o", 10)
    end = PartitionDir(pdir).log_end_offset()
    lso = lso_of(bs, topic)
    assert lso < end, "the open transaction holds the broker's LSO"
    want_committed = [(o, k, v) for o, _tt, _ts, k, v, _h in consume_all(bs, topic, "read_committed", lso)]
    want_all = [(o, k, v) for o, _tt, _ts, k, v, _h in consume_all(bs, topic, "read_uncommitted", end)]

    d = Daemon(_config(kafka, tmp_path, topic, log_dirs=True, work="daemon"), once=True).start()
    assert d.run_once() == 0
    d.stop()

    with RemoteFetcher.from_config(_config(kafka, tmp_path, topic, log_dirs=True, work="r1")) as f:
        plan = f.plan(topic, 0)
        remote_end = plan.log_end
        first_segment_end = PartitionDir(pdir).segments[1].base_offset
        assert remote_end == first_segment_end, "only the segment holding the transactions' starts is tiered"
        txn_starts = [o for o, k, _v in want_all if k is not None and k[:1] in (b"c", b"a")]
        assert min(txn_starts) < remote_end, "the transactions start in the tiered segment"
        assert f.stable.last_stable_offset(plan) < remote_end, "the remote LSO alone stops inside the segment"
        bound = f.committed_bound(topic, 0)
        assert (bound.stable_offset, bound.limited) == (remote_end, False)
        assert f.last_stable_offset(topic, 0) == remote_end
        tiered_committed = [r for r in want_committed if r[0] < remote_end]
        assert any(k is not None and k.startswith(b"c") for _o, k, _v in tiered_committed)
        assert _rows(f, topic, "read_committed") == tiered_committed
        assert _fetched(f, topic, plan.log_start, plan.log_end) == [o for o, _k, _v in tiered_committed]
        assert _rows(f, topic, "read_uncommitted") == [r for r in want_all if r[0] < remote_end]
        # the Kafka endpoint serving this core: a real read_committed consumer gets the same
        endpoint = start_kafka_listener(f, "127.0.0.1", 0, state_dir=tmp_path / "endpoint")
        try:
            assert _consumed(endpoint.bootstrap, topic, "read_committed", remote_end) == tiered_committed
        finally:
            endpoint.close()

    # the log dir alone (no broker): its LSO is bounded by the high-watermark checkpoint, written
    # every 5 s, so it may lag; it gets there, and never reads past the broker's answer
    log_dir_only = _config(kafka, tmp_path, topic, log_dirs=True, work="r3", broker=False)
    with RemoteFetcher.from_config(log_dir_only) as f:
        wait_for("the log dir's LSO passes the remote end",
                 lambda: f.committed_bound(topic, 0).stable_offset == remote_end, timeout=30)
        assert _rows(f, topic, "read_committed") == tiered_committed

    with RemoteFetcher.from_config(_config(kafka, tmp_path, topic, log_dirs=False, work="r2")) as f:
        bound = f.committed_bound(topic, 0)
        assert bound.limited and bound.stable_offset == min(txn_starts), "no log dir: the remote LSO"
        assert _rows(f, topic, "read_committed") == [r for r in want_committed if r[0] < bound.stable_offset]
        r = f.fetch(topic, 0, bound.stable_offset, isolation="read_committed")
        assert r.empty and r.stable_limited and r.last_stable_offset == bound.stable_offset

    # merged mode without the log dir: the endpoint asks the broker how the frontier's transactions
    # ended. The broker's retention deletes the tiered segment first, so the consumer's reads below
    # the remote end can only be served from the remote tier.
    set_topic_config(bs, topic, **{"retention.bytes": "1"})
    wait_for("local retention deleted the tiered segment",
             lambda: _watermarks(bs, topic)[0] >= remote_end, timeout=90)
    with RemoteFetcher.from_config(_config(kafka, tmp_path, topic, log_dirs=False, work="r4")) as f:
        assert f.committed_bound(topic, 0).limited
        endpoint = EndpointThread(f, ListenerSettings(port=0, merged=True), tmp_path / "merged")
        try:
            bound = f.committed_bound(topic, 0)
            assert (bound.stable_offset, bound.limited) == (remote_end, False)
            assert [a.first_offset for a in bound.frontier_aborted] == [
                min(o for o, k, _v in want_all if k is not None and k.startswith(b"a"))]
            assert _rows(f, topic, "read_committed") == tiered_committed
            assert _consumed(endpoint.bootstrap, topic, "read_committed", lso) == want_committed
        finally:
            endpoint.close()
        assert f.committed_bound(topic, 0).limited, "the endpoint gone: the remote LSO again"
    left_open.abort_transaction(30)
