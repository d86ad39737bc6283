"""Which remote segments a table already holds, from its newest metadata alone.

Each topic's ledger (:mod:`rlm.tables.ledger_state`: per partition the offset ranges ever
appended, segment counts, expiry bounds; the topic's rows and id) is a **table property**,
``rlm.ledger.<topic>``, set in the same transaction as the append (or expiry) it describes, so
"rows added" and "segments recorded" stay one atomic commit. A table property survives what
removes snapshots or rewrites files: snapshot expiry (by PyIceberg, Spark, or a catalog on its
own), ``rlm iceberg compact``, another engine's ``rewrite_data_files``: they all write new
metadata from the current one, properties included. So the ledger needs only the newest
metadata: expiring every snapshot but the newest never makes a writer append a segment again.

Every commit the writer makes also names, in its snapshot summary, the segments it added
(``rlm.segments``, ``[partition, segment id, first offset, end offset (exclusive)]``), their
topic (``rlm.topic``, ``rlm.topic-id``), the writing pass (``rlm.writer``, a uuid per pass) and
the commit (``rlm.commit``): an audit trail, the migration source for tables written before the
property, and how a writer whose commit answer was lost finds its own commit.

Reading a topic's ledger (:func:`read_ledgers`):

* the property, as of its anchor snapshot; summaries of ancestors newer than the anchor (an
  older rlm still writing beside this one) are added to it;
* no property (a table written before it): the union of the ancestry's ``rlm.segments`` when
  the ancestry is whole (reaches the table's first snapshot), as before; the next commit writes
  the property (the migration);
* neither can be trusted (no property and snapshots already expired; or the property's anchor
  is a snapshot the table was rolled back from): rebuilt from the rows themselves (each row
  names its partition, offset and segment), which is what the table holds by definition.

A table can hold several topics (``iceberg.shared_tables``): one property per topic, so one
topic's partition 0 never stands for another's. Snapshots committed before ``rlm.topic`` was
recorded belong to the table's ``rlm.topic`` property (a table of one topic).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc
import structlog
from pyiceberg.expressions import EqualTo, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.table.update import AssertRefSnapshotId

from rlm.tables.ledger_state import Ledger, SegmentWork

log = structlog.get_logger(__name__)

__all__ = ["COMMIT_KEY", "EXPIRED_KEY", "LEDGER_PREFIX", "SUMMARY_KEY", "TOPIC_ID_KEY", "TOPIC_KEY",
           "WRITER_KEY", "Ledger", "SegmentWork", "commit_keeping_files", "ledger_transaction", "read_ledger",
           "read_ledgers", "stage_ledger", "summary_properties"]

SUMMARY_KEY = "rlm.segments"
TOPIC_ID_KEY = "rlm.topic-id"
#: the topic a snapshot's segments (or expired rows) belong to; also the table property naming
#: the topic of a one-topic table
TOPIC_KEY = "rlm.topic"
#: the pass that made a commit (a uuid per pass) and the commit itself (``<writer>/<n>``)
WRITER_KEY = "rlm.writer"
COMMIT_KEY = "rlm.commit"
#: the summary of an expiry's snapshot (see :mod:`rlm.tables.expire`)
EXPIRED_KEY = "rlm.expired"
#: the table property holding a topic's ledger: ``rlm.ledger.<topic>``
LEDGER_PREFIX = "rlm.ledger."


def snapshot_topic(props: dict[str, Any], table: Table) -> str | None:
    """The topic a snapshot's rows belong to (``None``: not said, e.g. a compaction)."""
    topic = props.get(TOPIC_KEY) or table.properties.get(TOPIC_KEY)
    return str(topic) if topic else None


def snapshot_props(snap: Snapshot | None) -> dict[str, Any]:
    """A snapshot's summary properties (empty for none)."""
    return snap.summary.additional_properties if snap is not None and snap.summary is not None else {}


def topic_ancestry(table: Table, topic: str, current: Snapshot | None
                   ) -> Iterator[tuple[Snapshot, dict[str, Any]]]:
    """The snapshots of ``topic``'s rows on the ancestry of ``current`` (usually the table's
    current snapshot), newest first, each with its summary properties: the one walk of the
    snapshot history by topic (the ledger's newer-than-property part, the lag's last commit)."""
    for snap in ancestors_of(current, table.metadata):
        props = snapshot_props(snap)
        if snapshot_topic(props, table) == topic:
            yield snap, props


def _net_rows(props: dict[str, Any]) -> int:
    return int(props.get("added-records", "0")) - int(props.get("deleted-records", "0"))


@dataclass(slots=True)
class _Walk:
    """One topic's snapshots met walking the ancestry down from the current one: those newer
    than its property's anchor (all of them without a property)."""

    anchored: bool = False  # the anchor is an ancestor
    rows: int = 0
    segments: list[SegmentWork] = field(default_factory=list)
    topic_ids: set[str] = field(default_factory=set)
    expired: dict[int, int] = field(default_factory=dict)
    known: list[SegmentWork] = field(default_factory=list)  # named by any retained snapshot

    def take(self, props: dict[str, Any]) -> None:
        self.rows += _net_rows(props)
        if props.get(SUMMARY_KEY) and props.get(TOPIC_ID_KEY):
            self.topic_ids.add(str(props[TOPIC_ID_KEY]))
        self.segments.extend(_segments(props))
        if props.get(EXPIRED_KEY):
            for p, off in json.loads(props[EXPIRED_KEY])["below"].items():
                self.expired[int(p)] = max(self.expired.get(int(p), 0), int(off))

    def onto(self, ledger: Ledger) -> Ledger:
        for w in reversed(self.segments):  # oldest first
            ledger.add(w)
        for w in self.known:  # (already counted: the ids only)
            ledger.segments.setdefault(w.segment_id, w)
        ledger.rows += self.rows
        ledger.topic_ids |= self.topic_ids
        for p, off in self.expired.items():
            ledger.expired[p] = max(ledger.expired.get(p, 0), off)
        return ledger


def _segments(props: dict[str, Any]) -> list[SegmentWork]:
    raw = props.get(SUMMARY_KEY)
    return [SegmentWork(int(p), str(sid), int(a), int(b)) for p, sid, a, b in json.loads(raw)] if raw else []


def _stored(table: Table) -> dict[str, Ledger]:
    return {k[len(LEDGER_PREFIX):]: Ledger.from_property(v, f"{table.name()} property {k}")
            for k, v in table.properties.items() if k.startswith(LEDGER_PREFIX)}


def read_ledgers(table: Table) -> tuple[dict[str, Ledger], int, int]:
    """Per topic, the ledger of ``table`` as of its current metadata (refresh the table first);
    with the table's rows and the snapshots of the current ancestry."""
    stored = _stored(table)
    current = table.current_snapshot()
    total = int(snapshot_props(current).get("total-records", "0"))
    walks: dict[str, _Walk] = {t: _Walk() for t in stored}
    snapshots = 0
    oldest: Snapshot | None = None
    for snap in ancestors_of(current, table.metadata):
        snapshots += 1
        oldest = snap
        props = snapshot_props(snap)
        for name, st in stored.items():  # reached a topic's anchor: older snapshots are in it
            if st.anchor is not None and snap.snapshot_id == st.anchor[0]:
                walks[name].anchored = True
        topic = snapshot_topic(props, table)
        if topic is None:
            continue
        walk = walks.setdefault(topic, _Walk())
        if not walk.anchored:
            walk.take(props)
        walk.known.extend(_segments(props))
    whole = oldest is None or _first(oldest)
    out: dict[str, Ledger] = {}
    for name, walk in walks.items():
        state = stored.get(name)
        if state is not None and (walk.anchored or state.anchor is None
                                  or table.metadata.snapshot_by_id(state.anchor[0]) is None):
            # anchored, or the anchor expired: only snapshots newer than it add to the property
            seq = state.anchor[1] if state.anchor is not None else -1
            if not walk.anchored and seq > 0:
                walk = _newer_than(table, current, name, seq, walk.known)
            out[name] = walk.onto(state)
        elif state is None and whole:
            out[name] = walk.onto(Ledger(source="ancestry" if snapshots else "empty"))
        else:
            why = "rolled back from the ledger's snapshot" if state is not None else "snapshots expired"
            ids = walk.topic_ids | (state.topic_ids if state is not None else set())
            out[name] = rebuild_from_rows(table, name, ids, walk.expired, why)
    for done in out.values():
        done.snapshots = snapshots
    return out, total, snapshots


def _first(snap: Snapshot) -> bool:
    """True when ``snap`` is the table's first snapshot (an expiry that removes a snapshot's
    parent also clears its ``parent-snapshot-id``, so that cannot tell): sequence number 1, or
    (a v1 table, no sequence numbers) a snapshot that started from an empty table."""
    if snap.sequence_number:
        return snap.sequence_number == 1
    props = snapshot_props(snap)
    return int(props.get("total-records", "0")) == _net_rows(props)


def _newer_than(table: Table, current: Snapshot | None, topic: str, seq: int,
                known: list[SegmentWork]) -> _Walk:
    """The topic's snapshots of the ancestry with a sequence number above ``seq``."""
    walk = _Walk(known=known)
    for snap, props in topic_ancestry(table, topic, current):
        if (snap.sequence_number or 0) <= seq:
            break  # sequence numbers fall down the ancestry: no older one is above ``seq``
        walk.take(props)
    return walk


def rebuild_from_rows(table: Table, topic: str, topic_ids: set[str], expired: dict[int, int],
                      why: str) -> Ledger:
    """The ledger of ``topic`` from the rows the table holds (a segment per segment id, from its
    first to past its last row's offset): what neither the property nor the snapshots can tell
    any more. A segment's trailing control records or aborted records are no rows, so such a
    segment may be appended again from past its last row: that adds no rows."""
    ledger = Ledger(topic_ids=set(topic_ids), expired=dict(expired), source="data")
    if table.current_snapshot() is None:
        return ledger
    rows = table.scan(row_filter=EqualTo(term=Reference("topic"), value=literal(topic)),
                      selected_fields=("partition", "offset", "segment_id")).to_arrow()
    ledger.rows = rows.num_rows
    if rows.num_rows:
        agg = rows.group_by(["partition", "segment_id"]).aggregate([("offset", "min"), ("offset", "max")])
        order = pc.sort_indices(agg, sort_keys=[("partition", "ascending"), ("offset_min", "ascending")])
        for r in agg.take(order).to_pylist():
            ledger.add(SegmentWork(int(r["partition"]), str(r["segment_id"]), int(r["offset_min"]),
                                   int(r["offset_max"]) + 1))
    log.warning("iceberg_ledger_rebuilt_from_rows", table=table.name(), topic=topic, reason=why,
                segments=ledger.segment_count, rows=ledger.rows)
    return ledger


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
        for p, n in ledger.counts.items():  # (summed over topics: only the total is meaningful)
            out.counts[p] = out.counts.get(p, 0) + n
    if len(ledgers) == 1:
        only = next(iter(ledgers.values()))
        out.next_offset, out.ranges = dict(only.next_offset), dict(only.ranges)
    return out


def summary_properties(group: list[SegmentWork], topic_id: str, topic: str, writer: str = "",
                       commit: str = "") -> dict[str, str]:
    """The snapshot summary of a commit of ``group``: the segments, their topic, the pass and
    the commit."""
    out = {SUMMARY_KEY: json.dumps([w.to_json() for w in group], separators=(",", ":")),
           TOPIC_ID_KEY: topic_id, TOPIC_KEY: topic}
    if writer:
        out[WRITER_KEY] = writer
    if commit:
        out[COMMIT_KEY] = commit
    return out


def ledger_transaction(table: Table) -> Transaction:
    """A transaction on ``table`` that commits only while ``table``'s current snapshot is still
    the table's: a property is applied onto the catalog's newest metadata, so a commit that
    writes a ledger must not land on a version it was not computed from (an append requires
    this anyway; an expiry that deletes nothing, or a migration, would not)."""
    tx = table.transaction()
    head = table.current_snapshot()
    need = AssertRefSnapshotId.model_validate({"ref": "main",
                                               "snapshot-id": head.snapshot_id if head else None})
    tx._stage((), (need,))
    return tx


def commit_keeping_files(tx: Transaction) -> Table:
    """Commit ``tx`` without PyIceberg's clean-up of a failed commit: on a
    ``CommitFailedException`` it deletes the manifests it wrote for the commit, taking the
    exception for proof that the commit did not land. A catalog client that retries after a lost
    answer reports exactly that for a commit that did land (the retry finds the table moved on),
    and the table's current snapshot would then point to deleted manifests. The writer finds out
    itself whether its commit landed (:func:`rlm.tables.writer.IcebergSync._landed`); a
    commit that really failed leaves a few unreferenced manifest files under ``metadata/``."""
    if hasattr(tx, "_snapshot_producers"):
        tx._snapshot_producers = []  # (PyIceberg >= 0.12: what its clean-up walks)
    return tx.commit_transaction()


def stage_ledger(tx: Transaction, topic: str, ledger: Ledger) -> None:
    """Put ``ledger`` (the topic's state after the changes staged in ``tx``, a
    :func:`ledger_transaction`) into ``tx`` as the topic's property, as of the snapshot ``tx``
    makes current."""
    staged = tx.table_metadata.current_snapshot()
    anchor = (staged.snapshot_id, staged.sequence_number or 0) if staged is not None else (-1, 0)
    tx.set_properties({LEDGER_PREFIX + topic: ledger.to_property(anchor)})
