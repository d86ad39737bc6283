"""Reads over HTTP equal the local log they were tiered from (standalone: local storage + file store)."""

from __future__ import annotations

import base64
import io
import json

import pyarrow as pa

from fetcher.http.encoders import ARROW, NDJSON, RAW
from rlm.log.lookup import find_offset_for_timestamp
from rlm.log.partition import PartitionDir
from rlm.log.records import ControlRecord, iter_batches, iter_records
from rlm.log.txn_index import AbortedTxn
from tests.fetcher_http.conftest import TOPIC, Api, Tiered

Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def local_rows(tiered: Tiered, partition: int, end: int, *, committed: bool = False) -> list[Row]:
    """Data records below ``end`` read from the local log dir with rlm.log; ``committed`` drops
    the records of aborted transactions (from the local .txnindex files)."""
    pdir = PartitionDir(tiered.logs / f"{TOPIC}-{partition}")
    aborted: list[AbortedTxn] = []
    for seg in pdir.segments:
        aborted.extend(pdir.aborted_transactions(seg))
    rows = []
    for seg in pdir.segments:
        for h, r in iter_records(seg.log_path):
            if isinstance(r, ControlRecord) or r.offset >= end:
                continue
            if committed and h.is_transactional and any(
                    a.producer_id == h.producer_id and a.first_offset <= r.offset <= a.last_offset
                    for a in aborted):
                continue
            rows.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return rows


def ndjson_rows(api: Api, partition: int, isolation: str = "read_uncommitted") -> tuple[list[Row], int]:
    """Walk the whole remote log with NDJSON pages (X-Next-Offset), 7 KB at a time."""
    seg = api.get(f"/v1/topics/{TOPIC}/partitions/{partition}/segments").json()
    offset, end = seg["log_start_offset"], seg["log_end_offset"]
    rows: list[Row] = []
    while offset < end:
        r = api.get(f"/v1/topics/{TOPIC}/partitions/{partition}/records", NDJSON, offset=offset,
                    max_bytes=7000, isolation=isolation)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith(NDJSON)
        for line in r.text.splitlines():
            o = json.loads(line)
            rows.append((o["offset"], o["timestamp"], _unb64(o["key"]), _unb64(o["value"]),
                         [(k, _unb64(v)) for k, v in o["headers"]]))
        nxt = int(r.headers["X-Next-Offset"])
        assert nxt > offset
        offset = nxt
    return rows, end


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def arrow_rows(api: Api, partition: int, isolation: str = "read_uncommitted") -> tuple[list[Row], int]:
    """Walk with Arrow streams of ~40 KB, continuing after the last row until a stream is empty."""
    seg = api.get(f"/v1/topics/{TOPIC}/partitions/{partition}/segments").json()
    offset, end = seg["log_start_offset"], seg["log_end_offset"]
    rows: list[Row] = []
    while offset < end:
        r = api.get(f"/v1/topics/{TOPIC}/partitions/{partition}/records", ARROW, offset=offset,
                    max_bytes=40000, isolation=isolation)
        assert r.status_code == 200, r.text
        table = pa.ipc.open_stream(io.BytesIO(r.content)).read_all()
        if table.num_rows == 0:
            break
        for o in table.to_pylist():
            rows.append((o["offset"], int(o["timestamp"].timestamp() * 1000) if o["timestamp"] else -1,
                         o["key"], o["value"], [(h["key"], h["value"]) for h in o["headers"] or []]))
        offset = rows[-1][0] + 1
    return rows, end


def test_topics_and_segments(api: Api, tiered: Tiered) -> None:
    topics = api.get("/v1/topics").json()["topics"]
    assert topics == [{"topic": TOPIC, "topic_id": str(tiered.tips[0].topic_id), "partitions": [0, 1]}]
    plan = api.get(f"/v1/topics/{TOPIC}/partitions/0/segments").json()
    pdir = PartitionDir(tiered.logs / f"{TOPIC}-0")
    local = pdir.inactive_segments()
    assert [s["start_offset"] for s in plan["segments"]] == [s.base_offset for s in local]
    assert plan["log_start_offset"] == 0 and plan["gaps"] == []
    assert plan["log_end_offset"] == pdir.next_segment(local[-1]).base_offset  # type: ignore[union-attr]
    assert [e["leader_epoch"] for e in plan["lineage"]] == [0, 3]
    assert all(s["size_bytes"] == seg.log_path.stat().st_size for s, seg in zip(plan["segments"], local,
                                                                               strict=True))


def test_ndjson_and_arrow_equal_local_log(api: Api, tiered: Tiered) -> None:
    for partition in (0, 1):
        got, end = ndjson_rows(api, partition)
        want = local_rows(tiered, partition, end)
        assert len(want) > 1000 if partition == 0 else len(want) > 100
        assert got == want
        got_arrow, _ = arrow_rows(api, partition)
        assert [(o, k, v, h) for o, _t, k, v, h in got_arrow] == [(o, k, v, h) for o, _t, k, v, h in want]
        assert [t for _o, t, *_ in got_arrow] == [t for _o, t, *_ in want]


def test_read_committed_drops_aborted_records(api: Api, tiered: Tiered) -> None:
    got, end = ndjson_rows(api, 0, "read_committed")
    want = local_rows(tiered, 0, end, committed=True)
    assert len(want) < len(local_rows(tiered, 0, end)), "the data must hold aborted transactions"
    assert got == want
    got_arrow, _ = arrow_rows(api, 0, "read_committed")
    assert [r[0] for r in got_arrow] == [r[0] for r in want]


def test_raw_bytes_are_the_remote_segment_slice(api: Api) -> None:
    fetcher = api.server.fetcher
    plan = fetcher.plan(TOPIC, 0)
    for offset in (0, 7, 605, 606, 3031, plan.log_end - 1):
        r = api.get(f"/v1/topics/{TOPIC}/partitions/0/records", RAW, offset=offset, max_bytes=20000)
        assert r.status_code == 200 and r.headers["content-type"] == RAW
        link = plan.segment_for(offset)
        assert r.headers["X-Remote-Segment-Id"] == str(link.metadata.remote_log_segment_id.id)
        with fetcher.rsm.fetch_log_segment(link.metadata, 0) as stream:
            remote = stream.read()
        first = next(h for h in iter_batches(remote) if h.last_offset >= offset)
        body = r.content
        assert body == remote[first.position:first.position + len(body)]
        batches = list(iter_batches(body))
        assert batches[-1].end_position == len(body), "whole batches only"
        assert len(body) <= 20000 or len(batches) == 1
        assert int(r.headers["X-Next-Offset"]) == batches[-1].last_offset + 1
        # the NDJSON answer of the same request holds those batches' records from the offset on
        lines = [json.loads(x) for x in api.get(f"/v1/topics/{TOPIC}/partitions/0/records", NDJSON,
                                                offset=offset, max_bytes=20000).text.splitlines()]
        want = [rec for h, rec in iter_records(body) if not isinstance(rec, ControlRecord)
                and rec.offset >= offset]
        assert [o["offset"] for o in lines] == [rec.offset for rec in want]
        assert all(o["position"] in {h.position for h in batches} for o in lines)


def test_offsets_by_timestamp_equal_local_lookup(api: Api, tiered: Tiered) -> None:
    for partition in (0, 1):
        pdir = PartitionDir(tiered.logs / f"{TOPIC}-{partition}")
        end = int(api.get(f"/v1/topics/{TOPIC}/partitions/{partition}/segments").json()["log_end_offset"])
        rows = local_rows(tiered, partition, end)
        stamps = sorted({rows[i][1] for i in range(0, len(rows), max(1, len(rows) // 25))})
        stamps += [rows[0][1] - 1, rows[-1][1]]
        for ts in stamps:
            body = api.get(f"/v1/topics/{TOPIC}/offsets", timestamp=str(ts)).json()
            got = next(p for p in body["partitions"] if p["partition"] == partition)
            want = find_offset_for_timestamp(pdir, ts)
            assert want is not None and want.offset < end
            assert (got["offset"], got["timestamp"], got["source"]) == (want.offset, want.timestamp, "remote")
            # records?timestamp= starts at that offset
            r = api.get(f"/v1/topics/{TOPIC}/partitions/{partition}/records", NDJSON, timestamp=str(ts),
                        max_bytes=10000)
            first = json.loads(r.text.splitlines()[0])
            assert first["offset"] >= want.offset and first["timestamp"] >= ts
    body = api.get(f"/v1/topics/{TOPIC}/offsets", timestamp="earliest").json()
    assert [(p["partition"], p["offset"]) for p in body["partitions"]] == [(0, 0), (1, 0)]
    # later than any remote record, standalone (no broker to ask): no answer
    body = api.get(f"/v1/topics/{TOPIC}/offsets", timestamp=str(2**50)).json()
    assert [(p["offset"], p["source"]) for p in body["partitions"]] == [(None, None), (None, None)]
    body = api.get(f"/v1/topics/{TOPIC}/offsets", timestamp="2026-01-02T03:04:05Z").json()
    assert body["timestamp"] == 1767323045000
