"""Which remote segments a table already holds: read back from its snapshots' summaries.

Every snapshot ``rlm iceberg`` commits carries ``rlm.segments``, a JSON list of
``[partition, segment id, first offset, end offset (exclusive)]`` for the segments it added,
``rlm.topic-id`` and ``rlm.topic``, the topic they belong to (a writer commits one topic's
segments at a time). The ledger is the union over the current snapshot's ancestry (a rolled-back
snapshot does not count), so it is exactly what the table's readers see; the writer reads it
before each append and again after a commit conflict. Keeping it in the snapshots, not in a file
beside the table, makes "rows added" and "segments recorded" one atomic commit.

A table can hold several topics (``iceberg.shared_tables``): the ledger is then kept per topic,
so one topic's partition 0 never stands for another's. Snapshots committed before ``rlm.topic``
was recorded belong to the table's ``rlm.topic`` property (a table of one topic).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

SUMMARY_KEY = "rlm.segments"
TOPIC_ID_KEY = "rlm.topic-id"
#: the topic a snapshot's segments (or expired rows) belong to; also the table property naming
#: the topic of a one-topic table
TOPIC_KEY = "rlm.topic"


@dataclass(frozen=True, slots=True)
class SegmentWork:
    """The offsets ``[start, end)`` of one lineage link (a remote segment) of one partition."""

    partition: int
    segment_id: str
    start: int
    end: int

    def to_json(self) -> list[int | str]:
        return [self.partition, self.segment_id, self.start, self.end]


@dataclass(slots=True)
class Ledger:
    """The segments of one topic recorded in a table, and per partition the end of the recorded
    offsets. ``rows``: the topic's rows in the table (the whole table's for :func:`read_ledger`
    without a topic)."""

    segments: dict[str, SegmentWork] = field(default_factory=dict)
    next_offset: dict[int, int] = field(default_factory=dict)
    snapshots: int = 0
    rows: int = 0
    topic_ids: set[str] = field(default_factory=set)

    def holds(self, work: SegmentWork) -> bool:
        """True when the segment, or the offsets it would add, are already in the table."""
        return work.segment_id in self.segments or work.start < self.next_offset.get(work.partition, 0)

    def add(self, work: SegmentWork) -> None:
        self.segments[work.segment_id] = work
        self.next_offset[work.partition] = max(self.next_offset.get(work.partition, 0), work.end)


def snapshot_topic(props: dict[str, Any], table: Table) -> str | None:
    """The topic a snapshot's rows belong to (``None``: not said, e.g. a compaction)."""
    topic = props.get(TOPIC_KEY) or table.properties.get(TOPIC_KEY)
    return str(topic) if topic else None


def _net_rows(props: dict[str, Any]) -> int:
    return int(props.get("added-records", "0")) - int(props.get("deleted-records", "0"))


def read_ledgers(table: Table) -> tuple[dict[str, Ledger], int, int]:
    """Per topic, the ledger of ``table`` as of its current metadata (refresh the table first);
    with the table's rows and snapshots. A topic's rows are the net rows of the snapshots that
    name it (appends, expiries); a compaction's replace names none and adds none."""
    out: dict[str, Ledger] = {}
    current = table.current_snapshot()
    total = 0
    if current is not None and current.summary is not None:
        total = int(current.summary.additional_properties.get("total-records", "0"))
    snapshots = 0
    for snap in ancestors_of(current, table.metadata):
        snapshots += 1
        props = snap.summary.additional_properties if snap.summary is not None else {}
        topic = snapshot_topic(props, table)
        if topic is None:
            continue
        ledger = out.setdefault(topic, Ledger())
        ledger.rows += _net_rows(props)
        raw = props.get(SUMMARY_KEY)
        if not raw:
            continue
        if props.get(TOPIC_ID_KEY):
            ledger.topic_ids.add(props[TOPIC_ID_KEY])
        for p, sid, start, end in json.loads(raw):
            ledger.add(SegmentWork(int(p), str(sid), int(start), int(end)))
    for ledger in out.values():
        ledger.snapshots = snapshots
    return out, total, snapshots


def read_ledger(table: Table, topic: str | None = None) -> Ledger:
    """The ledger of ``topic`` in ``table`` (refresh the table first). Without a topic, the whole
    table's: every topic's segments, the table's rows; ``next_offset`` only when the table holds
    one topic (offsets of different topics say nothing about each other)."""
    ledgers, total, snapshots = read_ledgers(table)
    if topic is not None:
        found = ledgers.get(topic, Ledger())
        found.snapshots = snapshots
        return found
    out = Ledger(snapshots=snapshots, rows=total)
    for ledger in ledgers.values():
        out.segments.update(ledger.segments)
        out.topic_ids |= ledger.topic_ids
    if len(ledgers) == 1:
        out.next_offset = dict(next(iter(ledgers.values())).next_offset)
    return out


def summary_properties(group: list[SegmentWork], topic_id: str, topic: str) -> dict[str, str]:
    return {SUMMARY_KEY: json.dumps([w.to_json() for w in group], separators=(",", ":")),
            TOPIC_ID_KEY: topic_id, TOPIC_KEY: topic}
