"""The table writer: tiered history as Apache Iceberg tables (``rlm iceberg``), read through ``fetcher``.

A layer of its own between :mod:`rlm.commands` and the read side: it reads the remote tier
through ``fetcher``'s public surface only, and nothing in ``fetcher`` imports it (import contract).

A derived, lagging copy of a topic's remote tier, one table per topic (or one for several,
``iceberg.shared_tables``), appended exactly once per remote segment:
:mod:`rlm.tables.table` (schema, partitioning, catalog), :mod:`rlm.tables.ledger`
(which segments a table holds: a table property set with each append) and
:mod:`rlm.tables.writer` (the pass that appends what is missing). Needs the ``iceberg``
extra (PyIceberg with SQLAlchemy for the embedded SQL catalog).
"""

from rlm.tables.ledger import Ledger, SegmentWork, read_ledger, read_ledgers
from rlm.tables.table import (
    ARROW_SCHEMA,
    SCHEMA,
    catalog_properties,
    ensure_table,
    open_catalog,
    partition_spec,
    table_identifier,
)
from rlm.tables.writer import HOLD_BEFORE_COMMIT_ENV, IcebergSync, PassResult, orphan_files

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
