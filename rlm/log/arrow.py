"""Decode ``.log`` data to Arrow with the schema of Spark's Kafka source (provisional slow path)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa

from rlm.log.model import ControlRecord
from rlm.log.records import iter_records
from rlm.log.source import Source

KAFKA_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("ms")),
        pa.field("timestampType", pa.int32()),
        pa.field(
            "headers", pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
        ),
    ]
)


def iter_arrow_batches(
    source: Source,
    *,
    topic: str,
    partition: int,
    max_batch_rows: int = 65536,
    start_offset: int | None = None,
    end_offset: int | None = None,
    verify_crc: bool = True,
    path: str | os.PathLike[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    rows: dict[str, list[object]] = {f.name: [] for f in KAFKA_SCHEMA}
    for _h, r in iter_records(source, path=path, verify_crc=verify_crc):
        if isinstance(r, ControlRecord):
            continue
        if start_offset is not None and r.offset < start_offset:
            continue
        if end_offset is not None and r.offset >= end_offset:
            continue
        rows["key"].append(r.key)
        rows["value"].append(r.value)
        rows["topic"].append(topic)
        rows["partition"].append(partition)
        rows["offset"].append(r.offset)
        rows["timestamp"].append(r.timestamp)
        rows["timestampType"].append(int(r.timestamp_type))
        rows["headers"].append([{"key": k, "value": v} for k, v in r.headers])
        if len(rows["offset"]) >= max_batch_rows:
            yield pa.RecordBatch.from_pydict(rows, schema=KAFKA_SCHEMA)
            rows = {f.name: [] for f in KAFKA_SCHEMA}
    if rows["offset"]:
        yield pa.RecordBatch.from_pydict(rows, schema=KAFKA_SCHEMA)


def read_arrow(
    source: Source,
    *,
    topic: str,
    partition: int,
    start_offset: int | None = None,
    end_offset: int | None = None,
    verify_crc: bool = True,
    path: str | os.PathLike[str] | None = None,
) -> pa.Table:
    batches = list(
        iter_arrow_batches(
            source,
            topic=topic,
            partition=partition,
            start_offset=start_offset,
            end_offset=end_offset,
            verify_crc=verify_crc,
            path=path,
        )
    )
    return pa.Table.from_batches(batches, schema=KAFKA_SCHEMA)
