"""The endpoint's offset store on a real directory: an append-only log that survives reopening,
compacts itself, expires offsets as Kafka's ``offsets.retention.minutes`` does, and loses only the
damaged record when a line is bad (moved aside, logged), never the other groups' offsets."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import structlog

from fetcher.kafka.offset_store import Committed, OffsetRetention, OffsetStore

DAY_MS = 24 * 3600 * 1000


def _store(tmp: Path, **kw: object) -> OffsetStore:
    return OffsetStore(tmp / "committed-offsets.log", legacy=tmp / "committed-offsets.json", **kw)  # type: ignore[arg-type]


def _offsets(store: OffsetStore) -> dict[str, dict[str, dict[int, int]]]:
    return {g: {t: {p: c.offset for p, c in ps.items()} for t, ps in store.topics(g).items()}
            for g in sorted(store.groups())}


def test_commits_append_and_survive_reopening(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.commit("g1", [("t", 0, Committed(5, 2, "m"))])
    inode = os.stat(s.path).st_ino
    size = s.path.stat().st_size
    s.commit("g2", [("t", 0, Committed(7, -1, None)), ("t", 1, Committed(8, -1, ""))])
    s.commit("g1", [("t", 0, Committed(6, 3, "n"))])
    # appended to the same file, not rewritten
    assert os.stat(s.path).st_ino == inode and s.path.stat().st_size > size
    assert s.get("g1", "t", 0) is not None and s.get("g1", "t", 0).commit_ms > 0  # type: ignore[union-attr]
    s.close()
    again = _store(tmp_path)
    assert _offsets(again) == {"g1": {"t": {0: 6}}, "g2": {"t": {0: 7, 1: 8}}}
    c = again.get("g1", "t", 0)
    assert c is not None and (c.leader_epoch, c.metadata) == (3, "n")
    assert again.get("g2", "t", 0) == Committed(7, -1, None, again.get("g2", "t", 0).commit_ms)  # type: ignore[union-attr]
    # the overwritten record was compacted away on opening
    assert len(again.path.read_bytes().splitlines()) == 3


def test_a_damaged_line_is_moved_aside_and_only_its_record_is_lost(tmp_path: Path) -> None:
    s = _store(tmp_path)
    for i, g in enumerate(["before", "victim", "after"]):
        s.commit(g, [("t", 0, Committed(10 + i, -1, None))])
    s.close()
    lines = s.path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"o":11', b'"o":99')  # a flipped byte: the checksum no longer matches
    s.path.write_bytes(b"".join(lines))
    with structlog.testing.capture_logs() as logs:
        reopened = _store(tmp_path)
    assert _offsets(reopened) == {"after": {"t": {0: 12}}, "before": {"t": {0: 10}}}
    damaged = [e for e in logs if e["event"] == "kafka_endpoint_offsets_damaged"]
    assert len(damaged) == 1 and damaged[0]["log_level"] == "error"
    assert damaged[0]["path"] == str(s.path) and damaged[0]["lines"] == [2]
    aside = Path(damaged[0]["moved_to"])
    assert aside.exists() and b'"o":99' in aside.read_bytes() and b"line 2" in aside.read_bytes()
    # a later commit keeps every other group's offsets, across another reopening
    reopened.commit("new", [("t", 0, Committed(1, -1, None))])
    reopened.close()
    assert _offsets(_store(tmp_path)) == {"after": {"t": {0: 12}}, "before": {"t": {0: 10}},
                                          "new": {"t": {0: 1}}}


def test_a_write_torn_by_a_crash_loses_only_that_commit(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.commit("kept", [("t", 0, Committed(3, -1, None))])
    s.close()
    with open(s.path, "ab") as f:
        f.write(b'0badc0de {"g":"torn","t":"t","p":0,"o":')
    with structlog.testing.capture_logs() as logs:
        reopened = _store(tmp_path)
    assert _offsets(reopened) == {"kept": {"t": {0: 3}}}
    assert [e["reasons"] for e in logs if e["event"] == "kafka_endpoint_offsets_damaged"] == [
        ["incomplete last line"]]
    assert reopened.path.read_bytes().endswith(b"\n")


def test_the_log_is_compacted_when_it_grows(tmp_path: Path) -> None:
    s = _store(tmp_path, compact_bytes=4096)
    for i in range(2000):
        s.commit(f"g{i % 5}", [("t", i % 3, Committed(i, -1, "x" * 20))])
    assert s.path.stat().st_size < 3 * 4096  # 15 live records, never more than twice the bound
    s.close()
    reopened = _store(tmp_path)
    assert reopened.get("g4", "t", 1) is not None and reopened.get("g4", "t", 1).offset == 1999  # type: ignore[union-attr]
    assert len(reopened.groups()) == 5


def test_expiry_follows_kafkas_retention_rules(tmp_path: Path) -> None:
    s = _store(tmp_path)
    for g in ("standalone", "live", "emptied-late", "emptied-early"):
        s.commit(g, [("t", 0, Committed(1, -1, None))])
    committed = s.get("live", "t", 0).commit_ms  # type: ignore[union-attr]
    now = committed + 8 * DAY_MS
    since = {
        "live": float("inf"),  # members: never expire
        "emptied-late": (committed + 2 * DAY_MS) / 1000,  # empty for 6 days: kept
        "emptied-early": (committed + DAY_MS / 2) / 1000,  # empty for 7.5 days: gone
    }
    assert s.expire(now, 7 * DAY_MS, since) == 2
    assert set(s.groups()) == {"live", "emptied-late"}
    s.close()
    assert set(_store(tmp_path).groups()) == {"live", "emptied-late"}  # the removals are durable


def test_the_retention_loop_runs_at_its_interval(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.commit("g", [("t", 0, Committed(1, -1, None))])
    runs: list[int] = []

    async def run(fn: object) -> int:
        runs.append(1)
        return fn()  # type: ignore[operator, no-any-return]

    retention = OffsetRetention(s, 0, 60_000, [lambda g: None], run)
    asyncio.run(retention())
    asyncio.run(retention())  # not due again for a minute
    assert runs == [1] and s.groups() == []


def test_the_earlier_one_file_store_is_migrated_group_by_group(tmp_path: Path) -> None:
    legacy = tmp_path / "committed-offsets.json"
    legacy.write_text(json.dumps({
        "good": {"t": {"0": {"offset": 5, "leader_epoch": 1, "metadata": "m"}}},
        "bad": {"t": {"0": {"offset": "not a number"}}},
        "also-good": {"u": {"2": {"offset": 9}}},
    }))
    with structlog.testing.capture_logs() as logs:
        s = _store(tmp_path)
    assert _offsets(s) == {"also-good": {"u": {2: 9}}, "good": {"t": {0: 5}}}
    assert any(e["event"] == "kafka_endpoint_offsets_damaged" and e["path"] == str(legacy) for e in logs)
    assert not legacy.exists() and (tmp_path / "committed-offsets.json.migrated").exists()
    s.close()
    assert _offsets(_store(tmp_path)) == {"also-good": {"u": {2: 9}}, "good": {"t": {0: 5}}}
