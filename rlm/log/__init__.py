"""Kafka's on-disk formats: record batches, indexes, snapshots, checkpoints, partition directories.

What other packages use is exported here; ``rlm.log._*`` modules are private to this package
(the layers contract in ``pyproject.toml`` is checked by import-linter).
"""

from rlm.log._fileio import file_size, read_bytes
from rlm.log._scan import read_entry, scan_batches
from rlm.log.arrow import KAFKA_SCHEMA, iter_arrow_batches, read_arrow

# Partition-directory files (indexes, snapshots, checkpoints) and the tools built on them.
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
