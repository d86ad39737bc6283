"""Compaction of a topic's Iceberg table: small files of closed partitions rewritten at target size.

The writer appends a snapshot per group of remote segments, so a table fed segment by segment
(small segments, ``--follow`` with little traffic, ``segments_per_commit=1``) ends up with many
small files per day. :func:`compact` rewrites, for every *closed* partition (a ``day``/``hour``
partition older than the newest one of the table: no later append adds rows to it; every
partition when the spec has no time transform) that has at least ``min_files`` files smaller
than the target, those files as target-size files sorted by (partition, offset), and commits
the whole rewrite as **one** snapshot that deletes the old files and adds the new ones. In a
table of several topics partitioned by ``topic`` (``iceberg.shared_tables``), "older than the
newest" is per topic: a quiet topic's last day stays open while another topic moves on.

The snapshot carries no ``rlm.segments`` and leaves the ledger as it is: the ledger is a table
property (:mod:`rlm.tables.ledger`), which a commit carries over, so a rerun of the writer
adds nothing, also once the snapshots before the compaction are expired. The rows are the same (same count,
checked before the commit). The old files stay referenced by the older snapshots (time travel)
until snapshots are expired.

It also deletes *orphan* data files (written by a writer that died before its commit, see
:func:`rlm.tables.writer.orphan_files`) older than ``orphan_min_age_s``: a younger file can
belong to a writer that is about to commit, and deleting it would leave that commit pointing to
a missing file.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import PyArrowFileIO, _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.transforms import DayTransform, HourTransform

from rlm.errors import IcebergTableError
from rlm.tables.ledger import WRITER_KEY
from rlm.tables.table import ARROW_SCHEMA, ROW_ORDER, SCHEMA

log = structlog.get_logger(__name__)

TARGET_PROPERTY = "write.target-file-size-bytes"
#: the summary key of a compaction snapshot: ``{"rewritten": N, "written": N, "partitions": N}``
COMPACTION_KEY = "rlm.compaction"


@dataclass(slots=True)
class CompactResult:
    """What one compaction did."""

    partitions: int = 0  # partitions rewritten
    files_rewritten: int = 0  # small files replaced
    files_written: int = 0  # target-size files that replaced them
    rows: int = 0  # rows in the rewritten files
    snapshot_id: int | None = None  # the replace commit (None: nothing to do)
    orphans_deleted: list[str] = field(default_factory=list)
    orphans_kept: list[str] = field(default_factory=list)  # too young to be sure they are orphans

    def to_dict(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "files_rewritten": self.files_rewritten,
            "files_written": self.files_written,
            "rows": self.rows,
            "snapshot": self.snapshot_id,
            "orphans_deleted": len(self.orphans_deleted),
            "orphans_kept": len(self.orphans_kept),
        }


class _ReplaceFiles(_OverwriteFiles):
    """An overwrite that says what it is: ``replace`` (same rows, other files). PyIceberg 0.12 only
    totals summaries of append/overwrite/delete, so the totals are computed as an overwrite's."""

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006
        s = super()._summary(snapshot_properties)
        return Summary(Operation.REPLACE, **s.additional_properties)


def _closed(table: Table, files: list[DataFile]) -> dict[tuple[int, tuple[Any, ...]], list[DataFile]]:
    """The files of closed partitions, by (spec id, partition values)."""
    by_part: dict[tuple[int, tuple[Any, ...]], list[DataFile]] = defaultdict(list)
    for f in files:
        by_part[(f.spec_id, tuple(f.partition[i] for i in range(len(f.partition))))].append(f)
    out = {}
    for key, group in by_part.items():
        spec = table.specs()[key[0]]
        times = [
            i for i, pf in enumerate(spec.fields) if isinstance(pf.transform, (DayTransform, HourTransform))
        ]
        if not times:
            out[key] = group
            continue
        i = times[0]
        # the newest time partition of the same topic (of the table, when not partitioned by topic)
        tj = [j for j, pf in enumerate(spec.fields) if pf.source_id == SCHEMA.find_field("topic").field_id]
        topic = tuple(key[1][j] for j in tj)
        newest = max(
            k[1][i]
            for k in by_part
            if k[0] == key[0] and k[1][i] is not None and tuple(k[1][j] for j in tj) == topic
        )
        if key[1][i] is not None and key[1][i] < newest:
            out[key] = group
    return out


def _read(table: Table, files: list[DataFile]) -> pa.Table:
    parts = []
    for f in files:
        with table.io.new_input(f.file_path).open() as stream:
            parts.append(pq.read_table(stream).select(ARROW_SCHEMA.names).cast(ARROW_SCHEMA))
    return pa.concat_tables(parts).sort_by(ROW_ORDER)


def compact(
    catalog: Catalog,
    identifier: str,
    *,
    target_file_size_bytes: int | None = None,
    min_files: int = 2,
    small_fraction: float = 0.75,
    orphan_min_age_s: float = 3600.0,
    retries: int = 5,
) -> CompactResult:
    """Rewrite the small files of the table's closed partitions in one replace snapshot, then
    delete orphan data files older than ``orphan_min_age_s``. ``target_file_size_bytes`` (when
    given) also becomes the table's ``write.target-file-size-bytes``, in the same commit."""
    result = CompactResult()
    run_id = uuid.uuid4().hex
    for attempt in range(retries + 1):
        table = catalog.load_table(identifier)
        target = target_file_size_bytes or int(table.properties.get(TARGET_PROPERTY, 512 * 1024 * 1024))
        small = int(target * small_fraction)
        live = [t.file for t in table.scan().plan_files()]
        todo = {k: [f for f in g if f.file_size_in_bytes < small] for k, g in _closed(table, live).items()}
        todo = {k: g for k, g in todo.items() if len(g) >= min_files}
        if not todo:
            if target_file_size_bytes and table.properties.get(TARGET_PROPERTY) != str(target):
                table.transaction().set_properties({TARGET_PROPERTY: str(target)}).commit_transaction()
            break
        tx = table.transaction()
        if table.properties.get(TARGET_PROPERTY) != str(target):
            tx.set_properties({TARGET_PROPERTY: str(target)})
        written: list[DataFile] = []
        old = [f for g in todo.values() for f in g]
        rows = 0
        for group in todo.values():
            data = _read(table, group)
            if data.num_rows != sum(f.record_count for f in group):
                raise IcebergTableError(
                    f"{identifier}: the files of a partition hold {data.num_rows} rows, "
                    f"their manifests say {sum(f.record_count for f in group)}"
                )
            rows += data.num_rows
            written += list(_dataframe_to_data_files(tx.table_metadata, data, table.io))
        props = {
            COMPACTION_KEY: json.dumps(
                {"rewritten": len(old), "written": len(written), "partitions": len(todo)},
                separators=(",", ":"),
            ),
            WRITER_KEY: run_id,  # who made the commit, as the writer's commits say
        }
        replace = _ReplaceFiles(
            operation=Operation.OVERWRITE, transaction=tx, io=table.io, snapshot_properties=props
        )
        with replace as r:
            for f in old:
                r.delete_data_file(f)
            for f in written:
                r.append_data_file(f)
        try:
            table = tx.commit_transaction()
        except CommitFailedException as e:  # a writer appended meanwhile: plan again on its version
            log.info("iceberg_compaction_conflict", table=identifier, attempt=attempt, error=str(e))
            for f in written:
                table.io.delete(f.file_path)
            continue
        snap = table.current_snapshot()
        result.snapshot_id = snap.snapshot_id if snap is not None else None
        result.partitions, result.files_rewritten, result.files_written, result.rows = (
            len(todo),
            len(old),
            len(written),
            rows,
        )
        log.info("iceberg_compaction", table=identifier, **result.to_dict())
        break
    else:
        raise IcebergTableError(f"{identifier}: compaction kept conflicting with writers ({retries} retries)")
    _remove_orphans(catalog.load_table(identifier), orphan_min_age_s, result)
    return result


def orphans_with_age(table: Table) -> list[tuple[str, float]]:
    """(uri, age in seconds) of the data files under ``data/`` that no snapshot references."""
    from rlm.tables.writer import orphan_files

    found = orphan_files(table)
    if not found:
        return []
    data = table.location().rstrip("/") + "/data"
    scheme, netloc, _ = PyArrowFileIO.parse_location(data)
    fs = (
        table.io.fs_by_scheme(scheme, netloc)
        if isinstance(table.io, PyArrowFileIO)
        else pafs.FileSystem.from_uri(data)[0]
    )
    now = time.time()
    out = []
    for uri in found:
        info = fs.get_file_info(PyArrowFileIO.parse_location(uri)[2])
        age = now - info.mtime.timestamp() if info.mtime is not None else float("inf")
        out.append((uri, age))
    return out


def _remove_orphans(table: Table, min_age_s: float, result: CompactResult) -> None:
    for uri, age in orphans_with_age(table):
        if age < min_age_s:
            result.orphans_kept.append(uri)
            continue
        table.io.delete(uri)
        result.orphans_deleted.append(uri)
    if result.orphans_deleted or result.orphans_kept:
        log.info(
            "iceberg_orphans",
            table=table.name(),
            deleted=len(result.orphans_deleted),
            kept_too_young=len(result.orphans_kept),
        )
