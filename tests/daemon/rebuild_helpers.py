"""Shared by the ``rlm metadata rebuild`` tests: what the read core answers for a partition."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from fetcher import RemoteFetcher


def read_path(f: RemoteFetcher, topic: str) -> tuple[Any, list[Any]]:
    """What a reader sees: the plan (segments chosen, ranges, lineage, gaps) and every record, and
    what a read_committed fetch from offset 0 returns."""
    plan = f.plan(topic, 0)
    chosen = [(s.metadata.remote_log_segment_id, s.first, s.last) for s in plan.segments]
    table = pa.Table.from_batches(list(f.scan(topic, 0)))
    cols = ("offset", "key", "value", "timestamp")
    rows = list(zip(*(table.column(c).to_pylist() for c in cols), strict=True))
    committed = f.fetch(topic, 0, 0, max_bytes=1 << 22, isolation="read_committed")
    return ((chosen, plan.lineage, plan.gaps, plan.log_start, plan.log_end),
            [rows, committed.records, committed.aborted_transactions, committed.next_offset])
