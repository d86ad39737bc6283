"""Decoded values in the topic's table, the rest in its dead-letter table — each record once.

:class:`Decoding` is what the writer calls when ``iceberg.decode`` is set. For a group of
segments it decodes the rows (:mod:`rlm.tables.decode`), returns the main table's rows
(Kafka columns + decoded columns) and commits the rows that did not decode, with the reason, to
``<table><dead_letter_suffix>`` — *before* the main table's commit.

Exactly once over two tables without a transaction spanning both: both tables keep a ledger
(:mod:`rlm.tables.ledger`: a table property set by each commit), and the main table's is
the one that says a segment is done. The dead-letter commit of a group records the group's
segments that had dead letters; it leaves out the rows of any segment its ledger already covers
(by offsets: the dead-letter table records some segments only). So:

* a crash before the dead-letter commit: neither table has the segment; the rerun does both;
* a crash between the two commits: the dead-letter table has the segment, the main table not;
  the rerun decodes it again (same bytes, same schema ids: same outcome), skips its dead
  letters (already there) and commits the main rows;
* two writers: the dead-letter commit conflicts like the main one; the loser reloads, leaves out
  the segments the winner recorded, and commits the rest (or nothing).

A row is in exactly one of the two tables, once.
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import structlog
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, NestedField, StringType

from rlm.config import IcebergConfig
from rlm.errors import IcebergTableError
from rlm.tables.decode import make_decoder
from rlm.tables.decoded import Decoder, decoded_schema
from rlm.tables.ledger import (
    SegmentWork,
    commit_keeping_files,
    ledger_transaction,
    read_ledger,
    stage_ledger,
    summary_properties,
)
from rlm.tables.table import NO_COMMIT_RETRY, SCHEMA, SORT_ORDER, table_identifier, topic_property

log = structlog.get_logger(__name__)

#: the dead-letter table: the Kafka columns (raw key and value always kept), the reason, and the
#: Confluent schema id when the value carried one
DEAD_LETTER_SCHEMA = Schema(
    *SCHEMA.fields,
    NestedField(20, "reason", StringType(), required=True),
    NestedField(21, "schema_id", IntegerType(), required=False),
)
DEAD_LETTER_ARROW: pa.Schema = DEAD_LETTER_SCHEMA.as_arrow()


class Decoding:
    """Decoding for one topic's table: the decoder, the dead-letter table, the split."""

    def __init__(self, catalog: Catalog, config: IcebergConfig, topic: str) -> None:
        assert config.decode is not None
        self.catalog = catalog
        self.config = config
        self.decoder: Decoder = make_decoder(config.decode)  # DecodeConfigError before anything is read
        self.cfg = self.decoder.cfg  # the columns (``json_schema``: perhaps from the registry)
        self.schema = decoded_schema(self.cfg)
        self.arrow_schema: pa.Schema = self.schema.as_arrow()
        self.topic = topic
        self.identifier = table_identifier(config, topic) + self.cfg.dead_letter_suffix
        self.dead_letter = self._ensure(topic)
        self.dead_letters = 0

    # ---- tables ----------------------------------------------------------------------------
    def prepare(self, table: Table) -> Table:
        """Add the decoded columns to the topic's table when they are not there yet (a table
        created before decoding was configured): a schema change, the old rows read as null."""
        names = {f.name for f in table.schema().fields}
        if all(f.name in names for f in self.cfg.fields):
            return table
        with table.update_schema() as update:
            update.union_by_name(self.schema)
        return table

    def _ensure(self, topic: str) -> Table:
        try:
            return self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            pass
        with contextlib.suppress(NamespaceAlreadyExistsError):
            self.catalog.create_namespace(self.config.namespace)
        try:
            return self.catalog.create_table(
                self.identifier, DEAD_LETTER_SCHEMA, sort_order=SORT_ORDER,
                properties={**topic_property(self.config, topic),
                            "rlm.dead-letter-of": table_identifier(self.config, topic),
                            **NO_COMMIT_RETRY})
        except TableAlreadyExistsError:
            return self.catalog.load_table(self.identifier)

    def summary(self) -> dict[str, Any]:
        """For ``rlm iceberg --json``: the dead-letter table and the rows it holds."""
        self.dead_letter = self.catalog.load_table(self.identifier)
        snap = self.dead_letter.current_snapshot()
        rows = snap.summary.additional_properties.get("total-records", "0") if snap and snap.summary else "0"
        return {"dead_letter_table": self.identifier, "dead_letter_rows": int(rows)}

    # ---- one group ---------------------------------------------------------------------------
    def split(self, group: list[SegmentWork], data: pa.Table, topic_id: str, table: Table,
              writer: str = "") -> pa.Table:
        """Decode ``data`` (rows of ``group``, Kafka columns); commit its dead letters (named by
        the pass ``writer``); return the rows for the main ``table`` (decoded columns added, in
        the table's schema)."""
        decoded = self.decoder.decode(data.column("value").combine_chunks())
        n = data.num_rows
        bad = np.zeros(n, dtype=bool)
        if decoded.errors:
            bad[list(decoded.errors)] = True
            self._commit_dead(group, data, decoded.errors, decoded.schema_ids, bad, topic_id, writer)
        good = pa.array(~bad)
        out = data
        if not self.cfg.keep_value:  # decoded rows only here: the raw bytes are not kept
            i = out.schema.get_field_index("value")
            out = out.set_column(i, out.schema.field(i), pa.nulls(n, out.schema.field(i).type))
        for f, col in zip(self.decoder.arrow_schema, decoded.columns, strict=True):
            out = out.append_column(f, col)
        return _conform(out.filter(good), table.schema().as_arrow())

    def _commit_dead(self, group: list[SegmentWork], data: pa.Table, errors: dict[int, str],
                     schema_ids: dict[int, int], bad: Any, topic_id: str, writer: str) -> None:
        idx = np.flatnonzero(bad)
        dead = data.take(pa.array(idx))
        dead = dead.append_column(DEAD_LETTER_ARROW.field("reason"),
                                  pa.array([errors[int(i)] for i in idx], pa.large_string()))
        # an id is 4 unsigned bytes, the column an Iceberg int: an id above 2^31 - 1 (no registry
        # hands one out; a garbage value after a 0 byte) is null there, its reason still names it
        ids = [schema_ids.get(int(i)) for i in idx]
        fits = [x if x is not None and x < 1 << 31 else None for x in ids]
        dead = dead.append_column(DEAD_LETTER_ARROW.field("schema_id"), pa.array(fits, pa.int32()))
        dead = _conform(dead, self.dead_letter.schema().as_arrow())
        for attempt in range(self.config.commit_retries + 1):
            self.dead_letter = self.catalog.load_table(self.identifier)
            held = read_ledger(self.dead_letter, self.topic)
            segs = {w.segment_id for w in group} & set(dead.column("segment_id").to_pylist())
            todo = [w for w in group if w.segment_id in segs and not held.covers(w)]
            if not todo:
                return  # a previous run (or another writer) committed these dead letters
            rows = dead.filter(pc.is_in(dead.column("segment_id"), pa.array([w.segment_id for w in todo])))
            after = copy.deepcopy(held)
            token = f"{writer}/dead-{uuid.uuid4().hex[:8]}"
            after.add_commit(todo, token)
            after.rows += rows.num_rows
            after.topic_ids.add(topic_id)
            try:
                tx = ledger_transaction(self.dead_letter)
                props = summary_properties(todo, topic_id, self.topic, writer, token)
                tx.append(rows, snapshot_properties=props)
                stage_ledger(tx, self.topic, after)
                self.dead_letter = commit_keeping_files(tx)
            except (CommitFailedException, CommitStateUnknownException) as e:  # a lost answer: covered next
                log.info("iceberg_dead_letter_conflict", table=self.identifier, attempt=attempt, error=str(e))
                continue
            self.dead_letters += rows.num_rows
            log.warning("iceberg_dead_letters", table=self.identifier, rows=rows.num_rows,
                        segments=len(todo), first_reason=rows.column("reason")[0].as_py())
            return
        raise IcebergTableError(f"{self.identifier}: dead-letter commit kept conflicting "
                                f"({self.config.commit_retries} retries)")



def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` in a table's current Arrow schema (its field ids: the catalog assigns them when
    it creates the table or adds columns); a column the data lacks is null."""
    cols = [data.column(f.name) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays([c.cast(f.type) for f, c in zip(schema, cols, strict=True)], schema=schema)
