"""Every read face beside every Kafka version (issue 40), cold, with the metadata topic at Kafka's
default 50 partitions and the default metadata wait: ``rlm offsets`` and ``rlm replay`` (remote +
broker), ``rlm serve`` with the HTTP API and ``--kafka-listener`` (start-up: the issue's 3.5/3.9
runs never reached listening), and the Kafka endpoint's merged mode: a confluent-kafka consumer
from offset 0 gets the tiered range from remote storage and the rest, with a live tail written
after the tiered range was deleted, forwarded from the broker, equal to what the broker served
(the issue's 2.8 run answered UNKNOWN_PARTITION instead of forwarding).

Shares ``written`` (tests/compat/conftest.py): one broker, one tiered topic per version.
"""

from __future__ import annotations

import json
import queue
import random
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition

from tests.compat.conftest import Written, rlm
from tests.daemon.helpers import produce_txn
from tests.fetcher_e2e.conftest import Rec, _produce_random, _producer, _watermarks, consume_all, lso_of
from tests.fetcher_e2e.test_remote_reads import _from_json

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ISOLATIONS = ["read_uncommitted", "read_committed"]
_START_S = 120  # only so a read face that never starts fails instead of hanging


@dataclass
class Served:
    """A running ``rlm serve --kafka-listener`` (cold start) and the tail written after it."""

    http: str  # base URL
    kafka: str  # the endpoint's bootstrap address (merged mode: bootstrap_servers is set)
    tail: dict[str, list[Rec]]  # per isolation: what the broker served past the written log


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    out: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line)
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


def _addresses(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """(HTTP base URL, Kafka bootstrap) from the lines ``rlm serve`` prints once listening."""
    lines = _lines(proc)
    http = kafka = ""
    while not (http and kafka):
        try:
            line = lines.get(timeout=_START_S)
        except queue.Empty:
            raise AssertionError(f"rlm serve printed no listening line in {_START_S} s") from None
        if line is None:
            raise AssertionError(f"rlm serve exited {proc.wait()} before listening")
        if line.startswith("kafka endpoint listening on "):
            kafka = line.split()[-1]
        elif line.startswith("http API listening on "):
            http = line.split()[4].rstrip("/")
    return http, kafka


def _write_tail(w: Written) -> dict[str, list[Rec]]:
    """Records written after the tiered range was deleted (plain and a committed transaction),
    as the broker serves them at each isolation level."""
    bs, topic = w.cluster.bootstrap, w.topic
    _, start = _watermarks(bs, topic)
    _produce_random(_producer(bs), topic, 150, random.Random(7), "live")
    produce_txn(bs, topic, f"{topic}-live", 50, commit=True)
    ends = {"read_uncommitted": _watermarks(bs, topic)[1], "read_committed": lso_of(bs, topic)}
    return {iso: [r for r in consume_all(bs, topic, iso, ends[iso]) if r[0] >= start] for iso in ISOLATIONS}


@pytest.fixture(scope="session")
def served(written: Written) -> Iterator[Served]:
    w = written
    assert w.remote_end > 0, "nothing tiered"
    tail = _write_tail(w)
    log = w.tmp / "serve.log"  # a file, not a pipe nobody reads while it runs
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlm.cli", "serve", "--config", str(w.reader("serve")), "--port", "0",
             "--kafka-listener", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1,
        )
    try:
        http, kafka = _addresses(proc)
        yield Served(http, kafka, tail)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        text = log.read_text()
        print(f"rlm serve ({w.cluster.version}) stderr, last 4000 characters:\n{text[-4000:]}")
        assert rc == 0 and "Traceback" not in text, text[-4000:]


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_merged_endpoint_equals_the_broker(written: Written, served: Served, isolation: str) -> None:
    """The whole log through one address: [0, remote end) exists only in remote storage (the
    broker deleted it), the rest and the live tail only at the broker."""
    w, s = written, served
    bs = w.cluster.bootstrap
    low, high = _watermarks(bs, w.topic)
    assert low >= w.remote_end, "the broker still has the tiered range"
    end = high if isolation == "read_uncommitted" else lso_of(bs, w.topic)
    got = consume_all(s.kafka, w.topic, isolation, end)
    assert got == w.want(isolation, end=sys.maxsize) + s.tail[isolation]
    # ListOffsets through the endpoint: the earliest is the remote start, the latest the broker's
    assert _watermarks(s.kafka, w.topic) == (0, high)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_http_records_equal_the_broker(written: Written, served: Served, isolation: str) -> None:
    w = written
    base = f"{served.http}/v1/topics/{w.topic}"
    got: list[Rec] = []
    offset = 0
    while offset < w.remote_end:
        r = requests.get(f"{base}/partitions/0/records", timeout=60,
                         params={"offset": str(offset), "isolation": isolation, "max_bytes": str(512 * 1024)})
        assert r.status_code == 200, r.text
        got += [_from_json(line.encode()) for line in r.text.splitlines()]
        nxt = int(r.headers["X-Next-Offset"])
        assert nxt > offset, (offset, dict(r.headers))
        offset = nxt
    assert [g for g in got if g[0] < w.remote_end] == w.want(isolation)
    for ts, want in w.list_offsets.items():
        r = requests.get(f"{base}/offsets", params={"timestamp": str(ts)}, timeout=60)
        assert r.json()["partitions"][0]["offset"] == want, (ts, r.text)


def test_cli_offsets_equal_the_broker(written: Written) -> None:
    """``rlm offsets`` cold: each timestamp inside the deleted range answers the first offset at or
    after it in what the broker served."""
    w = written
    assert w.list_offsets
    cold = w.reader("offsets")
    for ts, want in w.list_offsets.items():
        res = rlm("offsets", "--config", str(cold), "--topic", w.topic, "--partition", "0",
                  "--timestamp", str(ts), "--json")
        assert res.returncode == 0, res.stderr[-3000:]
        row = json.loads(res.stdout)
        assert (row["offset"], row["source"]) == (want, "remote"), (ts, row)
    earliest = json.loads(rlm("offsets", "--config", str(cold), "--topic", w.topic, "--partition", "0",
                              "--timestamp", "earliest", "--json").stdout)
    assert earliest["offset"] == 0


def test_cli_replay_resets_a_group_into_the_deleted_range(written: Written) -> None:
    """``rlm replay --execute`` cold: the group's committed offset is the first offset at or after the
    time, below the broker's own log start (the warning says so)."""
    w = written
    ts, want = min(w.list_offsets.items())
    group = f"replay-{uuid.uuid4().hex[:8]}"
    res = rlm("replay", "--config", str(w.reader("replay")), "--group", group, "--topic", w.topic,
              "--to-datetime", str(ts), "--execute", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    row = json.loads(res.stdout.splitlines()[-1])
    assert row["new_offset"] == want and row["executed"], row
    assert "below the broker's" in res.stderr
    c = Consumer({"bootstrap.servers": w.cluster.bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(w.topic, 0)], timeout=30)
    finally:
        c.close()
    assert committed[0].offset == want


def test_broker_list_offsets_agree_with_the_records(written: Written) -> None:
    """The timestamps the faces are asked about, asked of the broker before it deleted the range:
    its answers are the first offset at or after each time in what it served."""
    assert written.broker_offsets == written.list_offsets
