"""What a table holds of one topic, as one small value: the cumulative ledger state.

The state says, per partition, which offset ranges were ever appended (``[start, end)``,
adjacent ranges merged: a table fed in order holds one range per partition however many
segments it took), how many segments that was, and below which offset the rows were expired
(:mod:`rlm.tables.expire`); per topic, its topic id and rows, the snapshot the state is
as of (``anchor``: id and sequence number) and the last few commits (``tail``: commit token and
ranges per partition) so that a writer whose commit answer was lost can tell its own commit
from another writer's (:meth:`Ledger.owner`). Its size grows with partitions and gaps, never
with segments or snapshots: 100k segments of one partition fed in order are one range.

It is stored as a table property (``rlm.ledger.<topic>``) written in the same transaction as
the append (or expiry) it describes, see :mod:`rlm.tables.ledger`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rlm.errors import IcebergTableError

#: commits kept in the tail (enough for a writer to find its own after a conflict; older ones
#: are folded into the ranges)
TAIL = 16
VERSION = 1


@dataclass(frozen=True, slots=True)
class SegmentWork:
    """The offsets ``[start, end)`` of one lineage link (a remote segment) of one partition."""

    partition: int
    segment_id: str
    start: int
    end: int

    def to_json(self) -> list[int | str]:
        return [self.partition, self.segment_id, self.start, self.end]


def add_range(ranges: list[list[int]], start: int, end: int) -> list[list[int]]:
    """``ranges`` (sorted, disjoint, half-open) with ``[start, end)`` added, overlapping and
    adjacent ranges merged."""
    if start >= end:
        return ranges
    out: list[list[int]] = []
    for a, b in sorted([*ranges, [start, end]]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def covered(ranges: list[list[int]], start: int, end: int) -> bool:
    """True when ``[start, end)`` lies inside one of ``ranges``."""
    return start >= end or any(a <= start and end <= b for a, b in ranges)


@dataclass(slots=True)
class Ledger:
    """The segments of one topic recorded in a table, and per partition the end of the recorded
    offsets. ``segments``: the ids known by name (the retained snapshots' summaries, this
    process's commits, a rebuild from the rows); the count of all of them is
    :attr:`segment_count`. ``rows``: the topic's rows (the whole table's for
    :func:`rlm.tables.ledger.read_ledger` without a topic). ``source``: where it was read
    from (``property``, ``ancestry`` for a table not migrated yet, ``data`` when neither could
    be trusted, ``empty``)."""

    segments: dict[str, SegmentWork] = field(default_factory=dict)
    next_offset: dict[int, int] = field(default_factory=dict)
    snapshots: int = 0
    rows: int = 0
    topic_ids: set[str] = field(default_factory=set)
    ranges: dict[int, list[list[int]]] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    expired: dict[int, int] = field(default_factory=dict)  # per partition: rows below were expired
    tail: list[dict[str, Any]] = field(default_factory=list)  # [{"c": token, "r": {p: ranges}}]
    anchor: tuple[int, int] | None = None  # (snapshot id, sequence number) the state is as of
    source: str = "empty"

    @property
    def segment_count(self) -> int:
        return sum(self.counts.values())

    def holds(self, work: SegmentWork) -> bool:
        """True when the segment, or the offsets it would add, are already in the table."""
        return work.segment_id in self.segments or work.start < self.next_offset.get(work.partition, 0)

    def covers(self, work: SegmentWork) -> bool:
        """True when the segment's offsets all lie in ranges recorded (not just below the end):
        what a table that records only some segments (the dead-letter table) asks."""
        return work.segment_id in self.segments or covered(self.ranges.get(work.partition, []),
                                                           work.start, work.end)

    def low(self, partition: int) -> int | None:
        """The first offset ever recorded for ``partition`` (``None``: none)."""
        r = self.ranges.get(partition)
        return r[0][0] if r else None

    def add(self, work: SegmentWork) -> None:
        """Record ``work`` (idempotent: a segment already counted, by id or by its offsets, is
        not counted again)."""
        known = work.segment_id in self.segments or (
            work.start < work.end and covered(self.ranges.get(work.partition, []), work.start, work.end))
        self.segments[work.segment_id] = work
        self.ranges[work.partition] = add_range(self.ranges.get(work.partition, []), work.start, work.end)
        if not known:
            self.counts[work.partition] = self.counts.get(work.partition, 0) + 1
        self.next_offset[work.partition] = max(self.next_offset.get(work.partition, 0), work.end)

    def add_commit(self, group: list[SegmentWork], token: str) -> None:
        """Record ``group`` as the commit ``token`` (kept in the tail, the oldest folded away)."""
        per: dict[int, list[list[int]]] = {}
        for w in group:
            self.add(w)
            per[w.partition] = add_range(per.get(w.partition, []), w.start, w.end)
        self.tail = [*self.tail, {"c": token, "r": {str(p): r for p, r in sorted(per.items())}}][-TAIL:]

    def owner(self, group: list[SegmentWork]) -> str | None:
        """The token of the newest recorded commit whose ranges hold ``group``'s offsets
        (``None``: no commit of the tail holds all of them)."""
        for entry in reversed(self.tail):
            ranges = {int(p): r for p, r in entry["r"].items()}
            if all(covered(ranges.get(w.partition, []), w.start, w.end) for w in group):
                return str(entry["c"])
        return None

    # ---- the stored form -------------------------------------------------------------------
    def to_property(self, anchor: tuple[int, int]) -> str:
        """The state as of snapshot ``anchor`` (id, sequence number), as the property's value."""
        parts = {str(p): {"r": self.ranges.get(p, []), "n": self.counts.get(p, 0),
                          **({"x": self.expired[p]} if p in self.expired else {})}
                 for p in sorted(set(self.ranges) | set(self.expired) | set(self.counts))}
        return json.dumps({"v": VERSION, "ids": sorted(self.topic_ids), "rows": self.rows,
                           "at": list(anchor), "p": parts, "tail": self.tail}, separators=(",", ":"))

    @classmethod
    def from_property(cls, raw: str, where: str) -> Ledger:
        """The state stored by :meth:`to_property`; ``where`` names the property in the error
        raised for a value this code cannot read (never guessed at: a wrong ledger duplicates)."""
        try:
            doc = json.loads(raw)
            if doc.get("v") != VERSION:
                raise IcebergTableError(f"{where}: ledger version {doc.get('v')!r}, this rlm reads "
                                        f"{VERSION} (written by a newer rlm?)")
            out = cls(rows=int(doc["rows"]), topic_ids={str(i) for i in doc["ids"]},
                      anchor=(int(doc["at"][0]), int(doc["at"][1])), source="property",
                      tail=[{"c": str(e["c"]), "r": {str(p): _ranges(r) for p, r in e["r"].items()}}
                            for e in doc["tail"]])
            for p, part in doc["p"].items():
                out.ranges[int(p)] = _ranges(part["r"])
                out.counts[int(p)] = int(part["n"])
                if "x" in part:
                    out.expired[int(p)] = int(part["x"])
                if out.ranges[int(p)]:
                    out.next_offset[int(p)] = out.ranges[int(p)][-1][1]
            return out
        except IcebergTableError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise IcebergTableError(f"{where}: unreadable ledger ({type(e).__name__}: {e}); "
                                    f"starts {raw[:80]!r}") from None


def _ranges(raw: Any) -> list[list[int]]:
    out: list[list[int]] = []
    for a, b in raw:
        out = add_range(out, int(a), int(b))
    return out
