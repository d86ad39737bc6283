"""Only the leader-epoch lineage reaches the table: an unclean leader change, planned by the read
core from remote metadata alone (no broker; rows made up per offset, tagged with the segment).

The old leader copied epoch 5 up to offset 200; the new leader was elected at 150 (epoch 6), so
the old leader's 150..200 diverged. Its segment (the old copy of 100..200) must never be in the
table, though it is COPY_SEGMENT_FINISHED and overlaps the lineage.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import load_catalog

from fetcher.planning import plan_partition
from rlm.config import IcebergConfig
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TP = TopicIdPartition(KafkaUuid.random(), "t", 0)
FIN = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


def seg(start: int, end: int, epochs: list[tuple[int, int]]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(TP), start, end, 0, 1, 0, 100, tuple(epochs), FIN
    )


class Fetcher:
    """The read core's surface the writer uses, over made-up records: offset ``o`` of epoch ``e``
    has value ``e:o`` (the diverged copy would carry epoch 5 past 150)."""

    def __init__(self, segments: list[RemoteLogSegmentMetadata]) -> None:
        self.segments = segments

    def topics(self) -> dict[str, list[TopicIdPartition]]:
        return {"t": [TP]}

    def plan(self, tp: Any, partition: int | None = None) -> Any:
        return plan_partition(TP, self.segments)

    def scan(
        self, topic: str, partition: int, *, start_offset: int, end_offset: int, isolation: Any
    ) -> Iterator[pa.RecordBatch]:
        offs = list(range(start_offset, end_offset))
        epoch = [6 if o >= 150 else 5 for o in offs]
        yield pa.RecordBatch.from_pydict(
            {
                "key": [None] * len(offs),
                "value": [f"{e}:{o}".encode() for e, o in zip(epoch, offs, strict=True)],
                "topic": ["t"] * len(offs),
                "partition": [0] * len(offs),
                "offset": offs,
                "timestamp": [1_700_000_000_000 + o for o in offs],
                "timestampType": [0] * len(offs),
                "headers": [None] * len(offs),
            },
            schema=SCHEMA,
        )


def test_only_lineage_segments_reach_the_table(tmp_path: Path) -> None:
    from rlm.tables import IcebergSync, read_ledger

    old = seg(100, 200, [(5, 100)])  # the old leader's copy: 150..200 diverged
    new_a = seg(100, 149, [(5, 100)])  # the new leader's copy of epoch 5, cut at 149
    new_b = seg(150, 250, [(6, 150)])
    stale = seg(150, 190, [(5, 150)])  # starts with epoch 5 where epoch 6 rules
    (tmp_path / "wh").mkdir()
    catalog = load_catalog(
        "rlm", type="sql", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri()
    )
    sync = IcebergSync(
        Fetcher([old, new_a, new_b, stale]),
        catalog,  # type: ignore[arg-type]
        IcebergConfig(isolation="read_uncommitted"),
        "t",
    )
    r = sync.run_once()
    ids = {s.remote_log_segment_id.id.text for s in (new_a, new_b)}
    assert r.added_segments == 2
    ledger = read_ledger(sync.table)
    assert set(ledger.segments) == ids
    t = sync.table.scan().to_arrow().sort_by([("offset", "ascending")])
    assert t.column("offset").to_pylist() == list(range(100, 251))
    assert set(t.column("segment_id").to_pylist()) == ids
    assert all(not v.startswith(b"5:") for v in t.column("value").to_pylist()[50:])  # nothing diverged
    assert sync.run_once().added_segments == 0
