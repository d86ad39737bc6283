"""Committed consumer offsets of the endpoint's groups: an append-only log, compacted.

The endpoint is its own group coordinator (librdkafka asks a coordinator even for ``assign``),
so offsets committed through it live beside the read side's work dir, never in the real
cluster's ``__consumer_offsets``: a history reader's position must not move a live group's.

Why a log: a commit appends its partitions' records and fsyncs them (what a commit promises),
instead of rewriting and fsyncing every group's offsets each time. The log is compacted (its live
records written to a temp file, fsynced, renamed over it, the directory fsynced) when it is
opened with dead records in it and when it grows past twice its last compacted size (at least
``compact_bytes``). One line per record, ``<crc32 hex> <json>``: a commit
``{"g", "t", "p", "o", "e", "m", "ts"}`` (group, topic, partition, offset, leader epoch,
metadata, commit time in ms) or a removal ``{"g", "t", "p", "x": 1}`` (an expired offset).

A damaged line (a bad checksum, bad JSON, a missing field, a write torn by a crash) loses only
its own record: it is copied to ``<log>.damaged-<time>``, logged at error level with the file and
line number, and left out of the compacted log; every other record loads. A store of the earlier
format (one JSON document, ``committed-offsets.json``) is read once, group by group (a group that
does not parse is moved aside the same way), written to the log, and renamed ``*.migrated``.

Expiry is Kafka's ``offsets.retention.minutes``: :meth:`OffsetStore.expire` removes the offsets
of groups without members whose last commit, and the time the group became empty, are both older
than the retention; offsets of a group with members never expire.
"""

from __future__ import annotations

import json
import os
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: the log is compacted when it grows past twice its compacted size, and never below this
COMPACT_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Committed:
    offset: int
    leader_epoch: int
    metadata: str | None
    #: wall-clock commit time (ms); the store sets it on commit
    commit_ms: int = 0


class OffsetStore:
    """group -> topic -> partition -> :class:`Committed`, backed by an append-only log; thread-safe
    (the endpoint calls it on an executor: commits fsync)."""

    def __init__(self, path: Path, legacy: Path | None = None, compact_bytes: int = COMPACT_BYTES) -> None:
        self.path = path
        self.compact_bytes = compact_bytes
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, dict[int, Committed]]] = {}
        self._size = 0  # bytes in the log
        self._compacted = 0  # its size after the last compaction
        path.parent.mkdir(parents=True, exist_ok=True)
        records, damaged = self._load()
        migrated = self._migrate(legacy) if legacy is not None and legacy.exists() else False
        if damaged or migrated or records > self._live():
            self._compact()
        if migrated and legacy is not None:
            os.replace(legacy, legacy.with_name(legacy.name + ".migrated"))
            _fsync_dir(legacy.parent)
        self._file = open(path, "ab")  # noqa: SIM115 - the log stays open for appends

    # ---- reads -------------------------------------------------------------------------------
    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        with self._lock:
            return self._data.get(group, {}).get(topic, {}).get(partition)

    def topics(self, group: str) -> dict[str, dict[int, Committed]]:
        with self._lock:
            return {t: dict(ps) for t, ps in self._data.get(group, {}).items()}

    def has_group(self, group: str) -> bool:
        """Does ``group`` have a committed offset? (Its coordinator keeps an empty group while so.)"""
        with self._lock:
            return group in self._data

    def groups(self) -> list[str]:
        with self._lock:
            return list(self._data)

    # ---- writes ------------------------------------------------------------------------------
    def commit(self, group: str, entries: list[tuple[str, int, Committed]]) -> None:
        """Store ``entries`` (topic, partition, offset) of ``group``, durably, stamped with now."""
        if not entries:
            return
        now = int(time.time() * 1000)
        with self._lock:
            g = self._data.setdefault(group, {})
            lines = []
            for topic, partition, c in entries:
                c = replace(c, commit_ms=now)
                g.setdefault(topic, {})[partition] = c
                lines.append(_line(_commit_record(group, topic, partition, c)))
            self._append(lines)

    def expire(self, now_ms: int, retention_ms: int, live_since: Mapping[str, float | None]) -> int:
        """Remove the offsets past retention; ``live_since[group]`` is +inf while the group has
        members, the wall-clock time (s) it became empty, or absent/None when there is no such
        group (then its commit time alone counts). The number of offsets removed."""
        with self._lock:
            gone: list[tuple[str, str, int]] = []
            for group, topics in self._data.items():
                since = live_since.get(group)
                if since == float("inf"):
                    continue
                floor_ms = int(since * 1000) if since is not None else 0
                gone += [(group, t, p) for t, ps in topics.items() for p, c in ps.items()
                         if now_ms - max(c.commit_ms, floor_ms) >= retention_ms]
            if not gone:
                return 0
            for group, t, p in gone:
                topics = self._data[group]
                del topics[t][p]
                if not topics[t]:
                    del topics[t]
                if not topics:
                    del self._data[group]
            self._append([_line({"g": g, "t": t, "p": p, "x": 1}) for g, t, p in gone])
        log.info("kafka_endpoint_offsets_expired", offsets=len(gone), groups=len({g for g, _, _ in gone}),
                 retention_ms=retention_ms)
        return len(gone)

    def close(self) -> None:
        with self._lock:
            self._file.close()

    # ---- the log -----------------------------------------------------------------------------
    def _append(self, lines: list[bytes]) -> None:
        data = b"".join(lines)
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._size += len(data)
        if self._size > max(self.compact_bytes, 2 * self._compacted):
            self._file.close()
            self._compact()
            self._file = open(self.path, "ab")  # noqa: SIM115

    def _live(self) -> int:
        return sum(len(ps) for ts in self._data.values() for ps in ts.values())

    def _load(self) -> tuple[int, bool]:
        """Read the log into memory: (records read, whether damaged lines were moved aside)."""
        if not self.path.exists():
            return 0, False
        raw = self.path.read_bytes()
        records, bad = 0, []
        lines = raw.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line:
                continue
            if number == len(lines):  # no newline after it: a write torn by a crash
                bad.append((number, line, "incomplete last line"))
                continue
            try:
                rec = _parse(line)
                self._apply(rec)
            except (ValueError, KeyError, TypeError) as e:
                bad.append((number, line, str(e)))
                continue
            records += 1
        self._size = len(raw)
        if bad:
            self._move_aside(bad)
        return records, bool(bad)

    def _apply(self, rec: dict[str, Any]) -> None:
        group, topic, partition = str(rec["g"]), str(rec["t"]), int(rec["p"])
        if rec.get("x"):
            topics = self._data.get(group, {})
            topics.get(topic, {}).pop(partition, None)
            if topic in topics and not topics[topic]:
                del topics[topic]
            if group in self._data and not topics:
                del self._data[group]
            return
        metadata = rec.get("m")
        c = Committed(int(rec["o"]), int(rec.get("e", -1)), None if metadata is None else str(metadata),
                      int(rec.get("ts", 0)))
        self._data.setdefault(group, {}).setdefault(topic, {})[partition] = c

    def _move_aside(self, bad: list[tuple[int, bytes, str]], source: Path | None = None) -> None:
        source = source or self.path
        aside = source.with_name(f"{source.name}.damaged-{int(time.time() * 1000)}")
        with open(aside, "ab") as f:
            for number, line, why in bad:
                f.write(f"# {source.name} line {number}: {why}\n".encode() + line + b"\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(aside.parent)
        log.error("kafka_endpoint_offsets_damaged", path=str(source), lines=[n for n, _, _ in bad],
                  reasons=sorted({why for _, _, why in bad}), moved_to=str(aside),
                  note="these records are lost; every other group's offsets were kept")

    def _migrate(self, legacy: Path) -> bool:
        """Import the earlier one-document store, group by group. True when it was read."""
        stamp = int(legacy.stat().st_mtime * 1000)
        try:
            doc = json.loads(legacy.read_bytes())
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            self._move_aside([(1, legacy.read_bytes(), f"unreadable: {e}")], legacy)
            return True
        bad = []
        for number, (group, topics) in enumerate(doc.items(), 1):
            try:
                parsed = {str(t): {int(p): _legacy_entry(c, stamp) for p, c in parts.items()}
                          for t, parts in topics.items()}
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                bad.append((number, json.dumps({group: topics}).encode(), f"group {group!r}: {e}"))
                continue
            for t, parts in parsed.items():
                self._data.setdefault(str(group), {}).setdefault(t, {}).update(parts)
        if bad:
            self._move_aside(bad, legacy)
        log.info("kafka_endpoint_offsets_migrated", source=str(legacy), groups=len(doc) - len(bad))
        return True

    def _compact(self) -> None:
        """Rewrite the log with only the live records: temp file, fsync, rename, fsync the dir."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = b"".join(_line(_commit_record(g, t, p, c)) for g, ts in self._data.items()
                        for t, ps in ts.items() for p, c in ps.items())
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        self._size = self._compacted = len(data)


class OffsetRetention:
    """Kafka's offset expiry loop: every ``interval_ms`` (``offsets.retention.check.interval.ms``)
    the store drops offsets past ``retention_ms``, on an executor (it appends and fsyncs).

    Called by the group coordinator's ticker; ``live_since`` are the coordinators' (classic and
    KIP-848) views of a group, read on the event loop that owns them before the blocking part.
    """

    def __init__(self, store: OffsetStore, retention_ms: int, interval_ms: int,
                 live_since: Sequence[Callable[[str], float | None]],
                 run: Callable[[Callable[[], int]], Awaitable[int]]) -> None:
        self.store = store
        self.retention_ms = retention_ms
        self.interval_s = interval_ms / 1000
        self._sources = live_since
        self._run = run
        self._due = 0.0

    def since(self, group: str) -> float | None:
        """The latest of the coordinators' answers (+inf: live in one of them)."""
        answers = [s for s in (src(group) for src in self._sources) if s is not None]
        return max(answers) if answers else None

    async def __call__(self) -> None:
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + self.interval_s
        since = {g: self.since(g) for g in self.store.groups()}
        await self._run(lambda: self.store.expire(int(time.time() * 1000), self.retention_ms, since))


def _legacy_entry(c: dict[str, Any], stamp: int) -> Committed:
    metadata = c.get("metadata")
    return Committed(int(c["offset"]), int(c.get("leader_epoch", -1)),
                     None if metadata is None else str(metadata), stamp)


def _commit_record(group: str, topic: str, partition: int, c: Committed) -> dict[str, Any]:
    return {"g": group, "t": topic, "p": partition, "o": c.offset, "e": c.leader_epoch, "m": c.metadata,
            "ts": c.commit_ms}


def _line(rec: dict[str, Any]) -> bytes:
    body = json.dumps(rec, separators=(",", ":"), ensure_ascii=True).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def _parse(line: bytes) -> dict[str, Any]:
    crc, sep, body = line.partition(b" ")
    if not sep or len(crc) != 8:
        raise ValueError("no checksum")
    if int(crc, 16) != zlib.crc32(body):
        raise ValueError("checksum mismatch")
    rec = json.loads(body)
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    for key in ("g", "t", "p"):
        if key not in rec:
            raise KeyError(key)
    return rec


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
