"""Tiered history as an Apache Iceberg table (``rlm iceberg``): a face of the read core.

A derived, lagging copy of a topic's remote tier, one table per topic (or one for several,
``iceberg.shared_tables``), appended exactly once per remote segment:
:mod:`fetcher.iceberg.table` (schema, partitioning, catalog), :mod:`fetcher.iceberg.ledger`
(which segments a table holds: a table property set with each append) and
:mod:`fetcher.iceberg.writer` (the pass that appends what is missing). Needs the ``iceberg``
extra (PyIceberg with SQLAlchemy for the embedded SQL catalog).
"""

from fetcher.iceberg.ledger import Ledger, SegmentWork, read_ledger, read_ledgers
from fetcher.iceberg.table import (
    ARROW_SCHEMA,
    SCHEMA,
    catalog_properties,
    ensure_table,
    open_catalog,
    partition_spec,
    table_identifier,
)
from fetcher.iceberg.writer import HOLD_BEFORE_COMMIT_ENV, IcebergSync, PassResult, orphan_files

__all__ = [
    "ARROW_SCHEMA",
    "HOLD_BEFORE_COMMIT_ENV",
    "SCHEMA",
    "IcebergSync",
    "Ledger",
    "PassResult",
    "SegmentWork",
    "catalog_properties",
    "ensure_table",
    "open_catalog",
    "orphan_files",
    "partition_spec",
    "read_ledger",
    "read_ledgers",
    "table_identifier",
]
