"""Kafka's on-disk formats: record batches, indexes, snapshots, checkpoints, partition directories."""

from rlm.log.arrow import KAFKA_SCHEMA, iter_arrow_batches, read_arrow
from rlm.log.encode import encode_batch, encode_control_batch
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

__all__ = [
    "KAFKA_SCHEMA",
    "BatchHeader",
    "Compression",
    "ControlRecord",
    "ControlRecordType",
    "Record",
    "TimestampType",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "iter_arrow_batches",
    "iter_batches",
    "read_arrow",
]
