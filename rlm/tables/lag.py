"""How far a topic's Iceberg table is behind the remote tier, and where ``rlm status`` finds it.

The lag is measured against the read core's plan (the lineage segments a reader can serve):
per partition, the lineage segments the table's ledger does not hold yet and the offsets from
the table's end to the remote end. ``rlm iceberg`` measures it after every pass and writes it
to ``<work_dir>/iceberg/lag/<namespace.table>+<topic>.json`` (atomically; a table shared by
several topics has a lag per topic, from that topic's ledger); ``rlm status`` shows those
files (with their age: a writer that stopped stops updating them) and
:mod:`rlm.tables.metrics` exports the same numbers.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyiceberg.table import Table

from fetcher import RemoteFetcher
from rlm.tables.ledger import SUMMARY_KEY, Ledger, SegmentWork, topic_ancestry

LAG_DIR = ("iceberg", "lag")


@dataclass(slots=True)
class PartitionLag:
    partition: int
    remote_start: int  # the lineage's first offset (the log start)
    remote_end: int  # exclusive
    remote_segments: int  # lineage segments
    table_end: int  # exclusive end of the offsets the table holds (0: none)
    segments_behind: int  # lineage segments not in the table
    offsets_behind: int  # remote offsets past the table's end


@dataclass(slots=True)
class TableLag:
    topic: str
    table: str
    updated_ms: int
    last_commit_ms: int  # the newest append of segments (-1: none yet)
    segments: int  # segments recorded in the table
    rows: int
    waiting: int = 0  # segments past the read_committed bound (their transactions are undecided)
    partitions: list[PartitionLag] = field(default_factory=list)

    @property
    def segments_behind(self) -> int:
        return sum(p.segments_behind for p in self.partitions)

    @property
    def offsets_behind(self) -> int:
        return sum(p.offsets_behind for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "segments_behind": self.segments_behind,
            "offsets_behind": self.offsets_behind,
        }


def last_commit_ms(table: Table, topic: str, ledger: Ledger | None = None) -> int:
    """When the newest snapshot that added segments of ``topic`` was committed (-1: none
    retained; then the snapshot the topic's ledger is as of, when retained)."""
    for snap, props in topic_ancestry(table, topic, table.current_snapshot()):
        if props.get(SUMMARY_KEY):
            return int(snap.timestamp_ms)
    anchor = table.metadata.snapshot_by_id(ledger.anchor[0]) if ledger and ledger.anchor else None
    return int(anchor.timestamp_ms) if anchor is not None else -1


def measure(
    fetcher: RemoteFetcher, table: Table, ledger: Ledger, topic: str, identifier: str, waiting: int = 0
) -> TableLag:
    """The table's lag behind the remote tier of ``topic`` (``ledger``: the topic's, read from
    ``table``)."""
    out = TableLag(
        topic,
        identifier,
        int(time.time() * 1000),
        last_commit_ms(table, topic, ledger),
        ledger.segment_count,
        ledger.rows,
        waiting,
    )
    for tp in fetcher.topics().get(topic, []):
        plan = fetcher.plan(tp)
        end = ledger.next_offset.get(tp.partition, 0)
        behind = 0
        for link in plan.segments:
            w = SegmentWork(
                tp.partition, link.metadata.remote_log_segment_id.id.text, max(link.first, end), link.last + 1
            )
            if w.start < w.end and not ledger.holds(w):
                behind += 1
        out.partitions.append(
            PartitionLag(
                tp.partition,
                plan.log_start,
                plan.log_end,
                len(plan.segments),
                end,
                behind,
                max(0, plan.log_end - max(end, plan.log_start)),
            )
        )
    return out


def lag_path(work_dir: Path, identifier: str, topic: str) -> Path:
    return Path(work_dir).joinpath(*LAG_DIR, f"{identifier}+{topic}.json")


def write_lag(work_dir: Path, lag: TableLag) -> Path:
    """Replace the table's lag file at once (readers see the old file or the new one)."""
    path = lag_path(work_dir, lag.table, lag.topic)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(lag.to_dict(), sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    return path
