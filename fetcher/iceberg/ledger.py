"""Which remote segments a table already holds: read back from its snapshots' summaries.

Every snapshot ``rlm iceberg`` commits carries ``rlm.segments``, a JSON list of
``[partition, segment id, first offset, end offset (exclusive)]`` for the segments it added. The
ledger is the union over the current snapshot's ancestry (a rolled-back snapshot does not
count), so it is exactly what the table's readers see; the writer reads it before each append
and again after a commit conflict. Keeping it in the snapshots, not in a file beside the table,
makes "rows added" and "segments recorded" one atomic commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

SUMMARY_KEY = "rlm.segments"
TOPIC_ID_KEY = "rlm.topic-id"


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
    """The segments recorded in a table, and per partition the end of the recorded offsets."""

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


def read_ledger(table: Table) -> Ledger:
    """The ledger of ``table`` as of its current metadata (refresh the table first)."""
    out = Ledger()
    current = table.current_snapshot()
    if current is not None and current.summary is not None:
        out.rows = int(current.summary.additional_properties.get("total-records", "0"))
    for snap in ancestors_of(current, table.metadata):
        out.snapshots += 1
        props = snap.summary.additional_properties if snap.summary is not None else {}
        raw = props.get(SUMMARY_KEY)
        if not raw:
            continue
        if props.get(TOPIC_ID_KEY):
            out.topic_ids.add(props[TOPIC_ID_KEY])
        for p, sid, start, end in json.loads(raw):
            out.add(SegmentWork(int(p), str(sid), int(start), int(end)))
    return out


def summary_properties(group: list[SegmentWork], topic_id: str) -> dict[str, str]:
    return {SUMMARY_KEY: json.dumps([w.to_json() for w in group], separators=(",", ":")),
            TOPIC_ID_KEY: topic_id}
