"""Expiry (``iceberg.expire_deleted_segments``, off by default): the table forgets what Kafka forgot.

History tables usually outlive Kafka's retention, so by default rows stay when remote retention
(or ``DeleteRecords``) deletes their segments. With the option on, each pass removes from the
table the rows below each partition's log start offset (``RemoteFetcher.log_start``: the first
offset any reader may still serve; remote retention moves it past the segments it deletes,
``DeleteRecords`` to any offset) — an Iceberg delete by ``partition = p AND offset < start``,
copy-on-write (whole files dropped, files straddling the bound rewritten) — in one transaction.

Its snapshots carry ``rlm.expired``: ``{"below": {partition: offset}, "segments": [[partition,
segment id, first, end], ...]}`` (the recorded segments known by id whose rows went, wholly or in
part). The same commit writes the bounds into the topic's ledger property
(:mod:`rlm.tables.ledger`; with the rows left), so a rerun with the same log start does
nothing (idempotent) even after the snapshots are expired, and the ledger keeps the expired
offsets as written, so the writer never adds them back. In a table of several topics
(``iceberg.shared_tables``) the delete is ``topic = t AND (...)``, the snapshot names its topic
(``rlm.topic``) and the bounds are that topic's: one topic's expiry never touches another's rows.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import structlog
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.expressions import And, BooleanExpression, EqualTo, LessThan, Or, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from fetcher import RemoteFetcher
from rlm.errors import IcebergTableError
from rlm.tables.ledger import (
    EXPIRED_KEY,
    TOPIC_KEY,
    WRITER_KEY,
    commit_keeping_files,
    ledger_transaction,
    read_ledger,
    snapshot_props,
    stage_ledger,
)

log = structlog.get_logger(__name__)

__all__ = ["EXPIRED_KEY", "ExpireResult", "expire_deleted", "expired_bounds"]


@dataclass(slots=True)
class ExpireResult:
    """What one expiry did: per partition the new bound, the segments whose rows went, rows removed."""

    below: dict[int, int] = field(default_factory=dict)
    segments: list[list[Any]] = field(default_factory=list)
    rows_removed: int = 0


def expired_bounds(table: Table, topic: str) -> dict[int, int]:
    """Per partition, the offset below which ``topic``'s rows were expired (from the ledger)."""
    return dict(read_ledger(table, topic).expired)


def expire_deleted(
    fetcher: RemoteFetcher, catalog: Catalog, identifier: str, topic: str, retries: int = 5,
    writer: str = "",
) -> ExpireResult:
    """Delete the rows below each partition's log start that are still in the table (``writer``:
    the pass's identity, named in the commit's summary)."""
    for attempt in range(retries + 1):
        table = catalog.load_table(identifier)
        ledger = read_ledger(table, topic)
        result = ExpireResult()
        for tp in fetcher.topics().get(topic, []):
            start = fetcher.log_start(tp).offset
            low = ledger.low(tp.partition)
            if start > ledger.expired.get(tp.partition, 0) and low is not None and low < start:
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
            **({WRITER_KEY: writer} if writer else {}),
        }
        before = _total(table.current_snapshot())
        tx = ledger_transaction(table)
        tx.delete(where, snapshot_properties=props)
        result.rows_removed = before - _total(tx.table_metadata.current_snapshot())
        after = copy.deepcopy(ledger)
        after.expired.update(result.below)
        after.rows -= result.rows_removed
        stage_ledger(tx, topic, after)
        try:
            table = commit_keeping_files(tx)
        except (CommitFailedException, CommitStateUnknownException) as e:
            # a lost answer of a commit that landed: the next attempt finds the bounds recorded
            log.info("iceberg_expiry_conflict", table=identifier, attempt=attempt, error=str(e))
            continue
        log.info(
            "iceberg_expired",
            table=identifier,
            below=result.below,
            segments=len(result.segments),
            rows=result.rows_removed,
        )
        return result
    raise IcebergTableError(f"{identifier}: expiry kept conflicting with writers ({retries} retries)")


def _total(snap: Snapshot | None) -> int:
    """The table's rows as of ``snap``."""
    return int(snapshot_props(snap).get("total-records", "0"))
