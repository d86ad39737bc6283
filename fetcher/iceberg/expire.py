"""Expiry (``iceberg.expire_deleted_segments``, off by default): the table forgets what Kafka forgot.

History tables usually outlive Kafka's retention, so by default rows stay when remote retention
(or ``DeleteRecords``) deletes their segments. With the option on, each pass removes from the
table the rows below each partition's log start offset (``RemoteFetcher.log_start``: the first
offset any reader may still serve; remote retention moves it past the segments it deletes,
``DeleteRecords`` to any offset) — an Iceberg delete by ``partition = p AND offset < start``,
copy-on-write (whole files dropped, files straddling the bound rewritten) — in one transaction.

Its snapshots carry ``rlm.expired``: ``{"below": {partition: offset}, "segments": [[partition,
segment id, first, end], ...]}`` (the recorded segments whose rows went, wholly or in part).
The bound per partition is read back from the ancestry, so a rerun with the same log start does
nothing (idempotent), and the append snapshots keep naming the expired segments, so the writer
never adds them back. In a table of several topics (``iceberg.shared_tables``) the delete is
``topic = t AND (...)``, the snapshot names its topic (``rlm.topic``) and the bounds read back
are that topic's: one topic's expiry never touches another's rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import structlog
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import And, BooleanExpression, EqualTo, LessThan, Or, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from fetcher import RemoteFetcher
from fetcher.iceberg.ledger import TOPIC_KEY, read_ledger, snapshot_topic
from rlm.errors import IcebergTableError

log = structlog.get_logger(__name__)

EXPIRED_KEY = "rlm.expired"


@dataclass(slots=True)
class ExpireResult:
    """What one expiry did: per partition the new bound, the segments whose rows went, rows removed."""

    below: dict[int, int] = field(default_factory=dict)
    segments: list[list[Any]] = field(default_factory=list)
    rows_removed: int = 0


def expired_bounds(table: Table, topic: str) -> dict[int, int]:
    """Per partition, the offset below which ``topic``'s rows were expired (from the snapshots)."""
    out: dict[int, int] = {}
    for snap in ancestors_of(table.current_snapshot(), table.metadata):
        props = snap.summary.additional_properties if snap.summary is not None else {}
        raw = props.get(EXPIRED_KEY)
        if raw and snapshot_topic(props, table) == topic:
            for p, off in json.loads(raw)["below"].items():
                out[int(p)] = max(out.get(int(p), 0), int(off))
    return out


def expire_deleted(
    fetcher: RemoteFetcher, catalog: Catalog, identifier: str, topic: str, retries: int = 5
) -> ExpireResult:
    """Delete the rows below each partition's log start that are still in the table."""
    for attempt in range(retries + 1):
        table = catalog.load_table(identifier)
        ledger = read_ledger(table, topic)
        done = expired_bounds(table, topic)
        result = ExpireResult()
        for tp in fetcher.topics().get(topic, []):
            start = fetcher.log_start(tp).offset
            if start > done.get(tp.partition, 0) and any(
                w.partition == tp.partition and w.start < start for w in ledger.segments.values()
            ):
                result.below[tp.partition] = start
        if not result.below:
            return ExpireResult()
        result.segments = sorted(
            [w.partition, w.segment_id, w.start, w.end]
            for w in ledger.segments.values()
            if w.start < result.below.get(w.partition, -1)
        )
        preds: list[BooleanExpression] = [
            And(
                EqualTo(term=Reference("partition"), value=literal(p)),
                LessThan(term=Reference("offset"), value=literal(off)),
            )
            for p, off in sorted(result.below.items())
        ]
        where = And(EqualTo(term=Reference("topic"), value=literal(topic)),
                    preds[0] if len(preds) == 1 else Or(*preds))
        props = {
            EXPIRED_KEY: json.dumps(
                {"below": {str(p): o for p, o in result.below.items()}, "segments": result.segments},
                separators=(",", ":"),
            ),
            TOPIC_KEY: topic,
        }
        before = read_ledger(table).rows
        tx = table.transaction()
        tx.delete(where, snapshot_properties=props)
        try:
            table = tx.commit_transaction()
        except CommitFailedException as e:
            log.info("iceberg_expiry_conflict", table=identifier, attempt=attempt, error=str(e))
            continue
        result.rows_removed = before - read_ledger(table).rows
        log.info(
            "iceberg_expired",
            table=identifier,
            below=result.below,
            segments=len(result.segments),
            rows=result.rows_removed,
        )
        return result
    raise IcebergTableError(f"{identifier}: expiry kept conflicting with writers ({retries} retries)")
