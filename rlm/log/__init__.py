"""Kafka's on-disk formats: record batches, indexes, snapshots, checkpoints, partition directories.

What other packages use is exported here; ``rlm.log._*`` modules are private to this package
(the layers contract in ``pyproject.toml`` is checked by import-linter).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlm.log._fileio import file_size, read_bytes
    from rlm.log._scan import read_entry, scan_batches
    from rlm.log.arrow import KAFKA_SCHEMA, iter_arrow_batches, read_arrow
    from rlm.log.checkpoints import (
        EpochEntry,
        MetaProperties,
        read_leader_epoch_checkpoint,
        read_meta_properties,
        read_offset_checkpoint,
        read_partition_metadata,
    )
    from rlm.log.encode import encode_batch, encode_control_batch
    from rlm.log.lookup import OffsetLocation, find_offset, find_offset_for_timestamp
    from rlm.log.lso import StableOffsets, aborted_transactions, last_stable_offset, stable_offsets
    from rlm.log.offset_index import OffsetIndex, OffsetPosition, read_offset_index
    from rlm.log.partition import LogDir, PartitionDir, Segment
    from rlm.log.producer_snapshot import ProducerSnapshotEntry, read_snapshot
    from rlm.log.producer_state import ProducerStateTracker, rebuild_producer_state, snapshot_bytes_at
    from rlm.log.records import (
        BatchHeader,
        Compression,
        ControlRecord,
        ControlRecordType,
        Record,
        TimestampType,
        decode_records,
        iter_batches,
    )
    from rlm.log.time_index import TimeIndex, TimestampOffset, read_time_index
    from rlm.log.txn_index import AbortedTxn, read_txn_index
    from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files

# The names load on first use (PEP 562): a process that needs only the partition-directory files
# (a CLI command, a Spark planning worker) does not pay for the batch decoders' numba kernels and
# Arrow builders until it decodes.
_HOMES = {
    "AbortedTxn": "rlm.log.txn_index",
    "BatchHeader": "rlm.log.records",
    "Compression": "rlm.log.records",
    "ControlRecord": "rlm.log.records",
    "ControlRecordType": "rlm.log.records",
    "EpochEntry": "rlm.log.checkpoints",
    "KAFKA_SCHEMA": "rlm.log.arrow",
    "LogDir": "rlm.log.partition",
    "MetaProperties": "rlm.log.checkpoints",
    "OffsetIndex": "rlm.log.offset_index",
    "OffsetLocation": "rlm.log.lookup",
    "OffsetPosition": "rlm.log.offset_index",
    "PartitionDir": "rlm.log.partition",
    "PartitionWriter": "rlm.log.writer",
    "ProducerSnapshotEntry": "rlm.log.producer_snapshot",
    "ProducerStateTracker": "rlm.log.producer_state",
    "Record": "rlm.log.records",
    "Segment": "rlm.log.partition",
    "StableOffsets": "rlm.log.lso",
    "TimeIndex": "rlm.log.time_index",
    "TimestampOffset": "rlm.log.time_index",
    "TimestampType": "rlm.log.records",
    "WriterConfig": "rlm.log.writer",
    "aborted_transactions": "rlm.log.lso",
    "decode_records": "rlm.log.records",
    "encode_batch": "rlm.log.encode",
    "encode_control_batch": "rlm.log.encode",
    "file_size": "rlm.log._fileio",
    "find_offset": "rlm.log.lookup",
    "find_offset_for_timestamp": "rlm.log.lookup",
    "iter_arrow_batches": "rlm.log.arrow",
    "iter_batches": "rlm.log.records",
    "last_stable_offset": "rlm.log.lso",
    "read_arrow": "rlm.log.arrow",
    "read_bytes": "rlm.log._fileio",
    "read_entry": "rlm.log._scan",
    "read_leader_epoch_checkpoint": "rlm.log.checkpoints",
    "read_meta_properties": "rlm.log.checkpoints",
    "read_offset_checkpoint": "rlm.log.checkpoints",
    "read_offset_index": "rlm.log.offset_index",
    "read_partition_metadata": "rlm.log.checkpoints",
    "read_snapshot": "rlm.log.producer_snapshot",
    "read_time_index": "rlm.log.time_index",
    "read_txn_index": "rlm.log.txn_index",
    "rebuild_producer_state": "rlm.log.producer_state",
    "scan_batches": "rlm.log._scan",
    "snapshot_bytes_at": "rlm.log.producer_state",
    "stable_offsets": "rlm.log.lso",
    "write_log_dir_files": "rlm.log.writer",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rlm.log' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "KAFKA_SCHEMA",
    "AbortedTxn",
    "BatchHeader",
    "Compression",
    "ControlRecord",
    "ControlRecordType",
    "EpochEntry",
    "LogDir",
    "MetaProperties",
    "OffsetIndex",
    "OffsetLocation",
    "OffsetPosition",
    "PartitionDir",
    "PartitionWriter",
    "ProducerSnapshotEntry",
    "ProducerStateTracker",
    "Record",
    "Segment",
    "StableOffsets",
    "TimeIndex",
    "TimestampOffset",
    "TimestampType",
    "WriterConfig",
    "aborted_transactions",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "file_size",
    "find_offset",
    "find_offset_for_timestamp",
    "iter_arrow_batches",
    "iter_batches",
    "last_stable_offset",
    "read_arrow",
    "read_bytes",
    "read_entry",
    "read_leader_epoch_checkpoint",
    "read_meta_properties",
    "read_offset_checkpoint",
    "read_offset_index",
    "read_partition_metadata",
    "read_snapshot",
    "read_time_index",
    "read_txn_index",
    "rebuild_producer_state",
    "scan_batches",
    "snapshot_bytes_at",
    "stable_offsets",
    "write_log_dir_files",
]
