"""The Iceberg table of a tiered topic: schema, partition spec, sort order, catalog, conversion.

The schema is Spark's Kafka source schema with Iceberg's types chosen once and for all (the
lesson of Redpanda's 25.3 break): ``timestamp`` is ``timestamptz`` (Kafka timestamps are UTC
instants), header keys are strings and header values binary, plus ``segment_id``, the remote
segment a row came from (what a repair or an expiry by segment selects on).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from rlm.config import DaemonConfig, IcebergConfig
from rlm.secrets import reveal_all

SCHEMA = Schema(
    NestedField(1, "key", BinaryType(), required=False),
    NestedField(2, "value", BinaryType(), required=False),
    NestedField(3, "topic", StringType(), required=True),
    NestedField(4, "partition", IntegerType(), required=True),
    NestedField(5, "offset", LongType(), required=True),
    NestedField(6, "timestamp", TimestamptzType(), required=True),
    NestedField(7, "timestampType", IntegerType(), required=True),
    NestedField(8, "headers", ListType(
        10, StructType(NestedField(11, "key", StringType(), required=True),
                       NestedField(12, "value", BinaryType(), required=False)),
        element_required=True), required=False),
    NestedField(9, "segment_id", StringType(), required=True),
)

#: the Arrow schema rows are built in (what PyIceberg writes for :data:`SCHEMA`)
ARROW_SCHEMA: pa.Schema = SCHEMA.as_arrow()


def partition_spec(partition_by: list[str]) -> PartitionSpec:
    """``day``/``hour`` of ``timestamp`` and/or identity on ``partition`` or ``topic``, in the
    order given."""
    fields = []
    for i, name in enumerate(partition_by):
        fid = 1000 + i
        if name == "day":
            fields.append(PartitionField(6, fid, DayTransform(), "timestamp_day"))
        elif name == "hour":
            fields.append(PartitionField(6, fid, HourTransform(), "timestamp_hour"))
        elif name == "topic":
            fields.append(PartitionField(3, fid, IdentityTransform(), "topic"))
        else:
            fields.append(PartitionField(4, fid, IdentityTransform(), "partition"))
    return PartitionSpec(*fields)


SORT_ORDER = SortOrder(SortField(source_id=4, transform=IdentityTransform()),
                       SortField(source_id=5, transform=IdentityTransform()))
#: a table of several topics: (topic, partition, offset)
SHARED_SORT_ORDER = SortOrder(SortField(source_id=3, transform=IdentityTransform()),
                              *SORT_ORDER.fields)
#: how rows are ordered in every data file (a writer's file holds one topic's rows)
ROW_ORDER = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]


def catalog_properties(config: DaemonConfig) -> dict[str, str]:
    """The PyIceberg catalog properties (secrets revealed): the configured ones, or the embedded
    default (SQL catalog on SQLite, local warehouse) under the work dir."""
    props = {k: str(v) for k, v in reveal_all(dict(config.iceberg.catalog)).items()}
    if not props:
        root = Path(config.work_dir).resolve() / "iceberg"
        (root / "warehouse").mkdir(parents=True, exist_ok=True)
        props = {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}",
                 "warehouse": (root / "warehouse").as_uri()}
    return props


def s3_checksums_when_required() -> None:
    """Make PyArrow's S3 client (the AWS C++ SDK) send request checksums only when an operation
    requires them, as the storage plugin's boto3 client does (``checksum_calculation``): the SDK's
    default aws-chunked uploads with checksum trailers are refused by several S3-compatible
    stores (SeaweedFS answers UploadPart with INVALID_ACCESS_KEY_ID). A value already set wins.
    Must run before the process's first S3 filesystem is created."""
    os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_REQUIRED")
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "WHEN_REQUIRED")


def open_catalog(config: DaemonConfig) -> Catalog:
    s3_checksums_when_required()
    return load_catalog(config.iceberg.catalog_name, **catalog_properties(config))


def table_identifier(cfg: IcebergConfig, topic: str) -> str:
    """``namespace.name`` of ``topic``'s table: its shared table (``shared_tables``) or one of its
    own (``table_name``); dots in the name would read as namespace levels."""
    shared = cfg.shared_table(topic)
    name = shared.name if shared is not None else cfg.table_name.format(topic=topic)
    return f"{cfg.namespace}.{re.sub(r'[.]', '_', name)}"


#: PyIceberg (>= 0.12) retries a conflicting append by rebasing it onto the winner's snapshot:
#: right for appends in general, wrong here (both writers' copies of a segment would land). The
#: writer handles conflicts itself (reads the ledger again), so the table turns that retry off.
NO_COMMIT_RETRY = {"commit.retry.num-retries": "0"}


def ensure_table(catalog: Catalog, cfg: IcebergConfig, topic: str) -> Table:
    """Load the topic's table, creating it (and its namespace) first if needed; a concurrent
    creator winning the race is fine."""
    ident = table_identifier(cfg, topic)
    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
        return _create(catalog, cfg, topic, ident)
    for _ in range(10):
        if all(table.properties.get(k) == v for k, v in NO_COMMIT_RETRY.items()):
            return table
        try:
            return table.transaction().set_properties(NO_COMMIT_RETRY).commit_transaction()
        except CommitFailedException:
            table = catalog.load_table(ident)
    return table


def _create(catalog: Catalog, cfg: IcebergConfig, topic: str, ident: str) -> Table:
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(cfg.namespace)
    try:
        return catalog.create_table(
            ident, SCHEMA, partition_spec=partition_spec(cfg.table_partition_by(topic)),
            sort_order=SORT_ORDER if cfg.shared_table(topic) is None else SHARED_SORT_ORDER,
            properties={"write.target-file-size-bytes": str(cfg.target_file_size_bytes),
                        **topic_property(cfg, topic), **NO_COMMIT_RETRY})
    except TableAlreadyExistsError:
        return catalog.load_table(ident)


def topic_property(cfg: IcebergConfig, topic: str) -> dict[str, str]:
    """``rlm.topic`` for a table of one topic (snapshots that do not name their topic are its);
    nothing for a shared table (every snapshot names its topic)."""
    return {} if cfg.shared_table(topic) is not None else {"rlm.topic": topic}


def to_rows(batch: pa.RecordBatch | pa.Table, segment_id: str) -> pa.Table:
    """A batch of the read core (``rlm.log.KAFKA_SCHEMA``) as rows of :data:`ARROW_SCHEMA`."""
    t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    n = t.num_rows
    cols: dict[str, Any] = {}
    for field in ARROW_SCHEMA:
        if field.name == "segment_id":
            cols[field.name] = pa.array([segment_id] * n, field.type)
        elif field.name == "timestamp":
            ms = pc.cast(t.column("timestamp"), pa.int64())
            cols[field.name] = pc.cast(pc.multiply(ms, 1000), pa.int64()).cast(field.type)
        else:
            cols[field.name] = t.column(field.name).cast(field.type)
    return pa.Table.from_pydict(cols, schema=ARROW_SCHEMA)


def parquet_files(table: Table, location: str) -> list[str]:
    """The Parquet files under ``location`` (recursively), as URIs of the table's FileIO, sorted:
    listed through the table's own filesystem (local, S3 with the catalog's endpoint, ...). Raises
    ``OSError`` or ``ValueError`` when the location cannot be listed."""
    import pyarrow.fs as pafs
    from pyiceberg.io.pyarrow import PyArrowFileIO

    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    fs = (table.io.fs_by_scheme(scheme, netloc) if isinstance(table.io, PyArrowFileIO)
          else pafs.FileSystem.from_uri(location)[0])
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    prefix = location[: len(location) - len(path)] if location.endswith(path) else f"{scheme}://"
    return sorted(prefix + i.path for i in infos
                  if i.type == pafs.FileType.File and i.path.endswith(".parquet"))
