"""Reads after the broker deleted the tiered segments: through ``fetcher`` and through the CLI,
everything equals what a confluent-kafka consumer and the broker's ListOffsets said before."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

from fetcher import RemoteFetcher
from rlm.errors import FencedLeaderEpochError, OffsetOutOfRangeError
from rlm.log.records import ControlRecord, TimestampType, iter_batches, iter_records
from rlm.types import IndexType
from tests.daemon.helpers import read_all
from tests.fetcher_e2e.conftest import Rec, Tiered

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]

_TS_TYPE = {
    TimestampType.CREATE_TIME: TIMESTAMP_CREATE_TIME,
    TimestampType.LOG_APPEND_TIME: TIMESTAMP_LOG_APPEND_TIME,
}
_TS_NAME = {"CreateTime": TIMESTAMP_CREATE_TIME, "LogAppendTime": TIMESTAMP_LOG_APPEND_TIME}


def _remote(recs: list[Rec], t: Tiered) -> list[Rec]:
    return [r for r in recs if r[0] < t.remote_end]


def fetch_all(f: RemoteFetcher, t: Tiered, isolation: str) -> tuple[list[Rec], list[Any]]:
    """Every record of the remote range by consecutive ``fetch`` calls (as a consumer would)."""
    out: list[Rec] = []
    results = []
    offset = 0
    while offset < t.remote_end:
        r = f.fetch(
            t.topic,
            0,
            offset,
            max_bytes=256 * 1024,
            isolation=isolation,
            drop_aborted=isolation == "read_committed",
            timeout_ms=30_000,
        )
        results.append(r)
        for _h, rec in iter_records(r.records):
            if isinstance(rec, ControlRecord) or rec.offset < offset:
                continue
            out.append(
                (
                    rec.offset,
                    _TS_TYPE[rec.timestamp_type],
                    rec.timestamp,
                    rec.key,
                    rec.value,
                    tuple(rec.headers),
                )
            )
        assert r.next_offset > offset
        offset = r.next_offset
    return out, results


def test_broker_deleted_the_tiered_range(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    plan = fetcher.plan(tiered.topic, 0)
    assert plan.log_start == 0 and plan.log_end == tiered.remote_end
    assert tiered.local_start >= tiered.remote_end > 0
    assert len(plan.lineage) >= 2, f"the leader bounce must show as a new epoch: {plan.lineage}"


def test_fetch_every_record_equal(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    got, results = fetch_all(fetcher, tiered, "read_uncommitted")
    assert got == _remote(tiered.uncommitted, tiered)
    assert all(r.aborted_transactions is None for r in results)


def test_read_committed_equal(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    got, results = fetch_all(fetcher, tiered, "read_committed")
    want = _remote(tiered.committed, tiered)
    assert got == want
    assert len(want) < len(_remote(tiered.uncommitted, tiered)), "the aborted transaction must be left out"
    assert any(r.aborted_transactions for r in results)
    # scan (Arrow) gives the same records
    tab = pa.Table.from_batches(list(fetcher.scan(tiered.topic, 0, isolation="read_committed")))
    assert tab.column("offset").to_pylist() == [r[0] for r in want]
    assert tab.column("value").to_pylist() == [r[4] for r in want]


def test_every_timestamp_lookup_equal(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    checked = 0
    for ts, want in tiered.list_offsets.items():
        if want is not None and want >= tiered.remote_end:
            continue  # answered by the broker's local log, which retention has since changed
        got = fetcher.offset_for_timestamp(tiered.topic, 0, ts)
        assert (got.offset if got is not None else None) == want, f"timestamp {ts}"
        assert got is None or got.source == "remote"
        checked += 1
    assert checked > 50


def test_raw_bytes_equal_remote_segment_slice(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    plan = fetcher.plan(tiered.topic, 0)
    objects = {
        str(link.metadata.remote_log_segment_id.id): read_all(fetcher.rsm.fetch_log_segment(link.metadata, 0))
        for link in plan.segments
    }
    _, results = fetch_all(fetcher, tiered, "read_uncommitted")
    for r in results:
        obj = objects[r.segment_id]
        pos = next(
            h.position for h in iter_batches(obj, verify_crc=False) if h.base_offset == r.first_batch_offset
        )
        assert r.records == obj[pos : pos + len(r.records)]
    # and the indexes the fetcher used are the broker's own files, tiered byte-exact
    link = plan.segments[0]
    assert read_all(fetcher.rsm.fetch_index(link.metadata, IndexType.OFFSET))


def test_fenced_and_out_of_range(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    plan = fetcher.plan(tiered.topic, 0)
    (old, _), (_, new_start) = plan.lineage[0], plan.lineage[1]
    fetcher.fetch(tiered.topic, 0, new_start, leader_epoch=old)  # at the epoch's end: allowed
    with pytest.raises(FencedLeaderEpochError):
        fetcher.fetch(tiered.topic, 0, new_start + 1, leader_epoch=old)
    r = fetcher.fetch(tiered.topic, 0, new_start + 1, leader_epoch=plan.latest_epoch)
    assert r.records
    with pytest.raises(OffsetOutOfRangeError) as e:
        fetcher.fetch(tiered.topic, 0, tiered.remote_end)
    assert (e.value.log_start, e.value.log_end) == (0, tiered.remote_end)


# ---- the CLI -------------------------------------------------------------------------------------
def rlm(t: Tiered, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    res = subprocess.run(
        [sys.executable, "-m", "rlm.cli", *args, "--config", str(t.config_path)],
        capture_output=True,
        timeout=300,
    )
    if check:
        assert res.returncode == 0, res.stderr.decode()
    return res


def _from_json(line: bytes) -> Rec:
    o = json.loads(line)
    b = lambda s: None if s is None else base64.b64decode(s)  # noqa: E731
    return (
        o["offset"],
        _TS_NAME[o["timestamp_type"]],
        o["timestamp"],
        b(o["key"]),
        b(o["value"]),
        tuple((k, b(v)) for k, v in o["headers"]),
    )


def test_cli_fetch_json_both_isolation_levels(tiered: Tiered) -> None:
    out = rlm(tiered, "fetch", "--topic", tiered.topic, "--partition", "0", "--offset", "0").stdout
    assert [_from_json(line) for line in out.splitlines()] == _remote(tiered.uncommitted, tiered)
    out = rlm(
        tiered, "fetch", "--topic", tiered.topic, "--offset", "0", "--isolation", "read_committed"
    ).stdout
    assert [_from_json(line) for line in out.splitlines()] == _remote(tiered.committed, tiered)


def test_cli_fetch_ranges_and_formats(tiered: Tiered, fetcher: RemoteFetcher) -> None:
    recs = _remote(tiered.uncommitted, tiered)
    mid = recs[len(recs) // 2]
    out = rlm(tiered, "fetch", "--topic", tiered.topic, "--offset", str(mid[0]), "--count", "25").stdout
    assert [_from_json(line) for line in out.splitlines()] == recs[len(recs) // 2 : len(recs) // 2 + 25]
    # --timestamp/--until-timestamp map as ListOffsets does
    ts = [t for t, o in tiered.list_offsets.items() if o is not None and o < tiered.remote_end]
    lo, hi = sorted(ts)[1], sorted(ts)[-2]
    a, b = tiered.list_offsets[lo], tiered.list_offsets[hi]
    assert a is not None and b is not None
    out = rlm(
        tiered, "fetch", "--topic", tiered.topic, "--timestamp", str(lo), "--until-timestamp", str(hi)
    ).stdout
    assert [_from_json(line) for line in out.splitlines()] == [r for r in recs if a <= r[0] < b]
    # raw: Kafka batch bytes, exactly the remote bytes (whole batches covering the range)
    raw = rlm(tiered, "fetch", "--topic", tiered.topic, "--offset", "0", "--format", "raw").stdout
    plan = fetcher.plan(tiered.topic, 0)
    assert raw == b"".join(
        read_all(fetcher.rsm.fetch_log_segment(link.metadata, 0)) for link in plan.segments
    )
    # arrow: an IPC stream with Spark's Kafka schema
    data = rlm(
        tiered,
        "fetch",
        "--topic",
        tiered.topic,
        "--offset",
        "0",
        "--until-offset",
        "3000",
        "--format",
        "arrow",
        "--isolation",
        "read_committed",
    ).stdout
    tab = pa.ipc.open_stream(data).read_all()
    assert tab.column("offset").to_pylist() == [
        r[0] for r in _remote(tiered.committed, tiered) if r[0] < 3000
    ]


def test_cli_offsets(tiered: Tiered) -> None:
    probe = [t for t, o in tiered.list_offsets.items() if o is None or o < tiered.remote_end]
    probe = probe[:2] + probe[-1:]  # the oldest two and the newest (no record that late)
    for ts in probe:
        out = rlm(tiered, "offsets", "--topic", tiered.topic, "--timestamp", str(ts), "--json").stdout
        rows = [json.loads(line) for line in out.splitlines()]
        assert [r["partition"] for r in rows] == [0]
        assert rows[0]["offset"] == tiered.list_offsets[ts]
        assert rows[0]["source"] == ("remote" if rows[0]["offset"] is not None else None)
    out = json.loads(
        rlm(tiered, "offsets", "--topic", tiered.topic, "--timestamp", "earliest", "--json").stdout
    )
    assert (out["offset"], out["source"]) == (0, "remote")
    out = json.loads(
        rlm(tiered, "offsets", "--topic", tiered.topic, "--timestamp", "latest", "--json").stdout
    )
    assert out["source"] == "broker" and out["offset"] > tiered.remote_end
    table = rlm(tiered, "offsets", "--topic", tiered.topic, "--timestamp", "2h-ago").stdout.decode()
    assert "SOURCE" in table.splitlines()[0] and "remote" in table


def test_cli_errors_exit_1(tiered: Tiered) -> None:
    res = rlm(tiered, "fetch", "--topic", tiered.topic, "--offset", str(tiered.remote_end), check=False)
    assert res.returncode == 1  # a runtime failure (exit statuses: docs/operations.md)
    assert f"[0, {tiered.remote_end})" in res.stderr.decode()
    res = rlm(tiered, "fetch", "--topic", "no-such-topic", "--offset", "0", check=False)
    assert res.returncode == 1 and b"no-such-topic" in res.stderr
