"""Assemble Arrow arrays with the Kafka-source schema from the buffers the kernel filled.

Arrays are made with ``from_buffers`` over numpy memory, with no per-row Python work. Output
buffers are allocated at an upper bound (payload size) and trimmed here: a buffer less than half
used is copied to its exact size so that the table does not pin mostly-empty allocations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from rlm.log.model import Record

HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
KAFKA_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("ms")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(HEADER_STRUCT)),
    ]
)

Arr = np.ndarray[Any, Any]


def pool_empty(shape: int | tuple[int, ...], dtype: type[np.generic]) -> Arr:
    """An uninitialised array in Arrow's memory pool.

    The pool (mimalloc/jemalloc) keeps freed memory mapped, so a process decoding segment after
    segment reuses warm pages instead of paying a page fault per 4 KiB of fresh output, and the
    memory shows up in ``pyarrow.total_allocated_bytes()`` like any Arrow data.
    """
    count = int(np.prod(shape))
    buf = pa.allocate_buffer(count * np.dtype(dtype).itemsize)
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


def trim(arr: Arr, n: int) -> Arr:
    """``arr[:n]``, copied (into the pool) when that uses less than half of ``arr``."""
    part = arr[:n]
    if n >= arr.shape[0] // 2:
        return part
    out = pool_empty(n, arr.dtype.type)
    out[:] = part
    return out


def _validity(flags: Arr, nulls: int) -> pa.Buffer | None:
    if nulls == 0:
        return None
    return pa.py_buffer(np.packbits(flags.astype(np.bool_), bitorder="little"))


def _binary(typ: pa.DataType, n: int, offsets: Arr, data: Arr, valid: Arr | None, nulls: int) -> pa.Array:
    bitmap = _validity(valid, nulls) if valid is not None else None
    return pa.Array.from_buffers(
        typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _header_keys(n: int, offsets: Arr, data: Arr, non_ascii: bool) -> pa.Array:
    keys = _binary(pa.string(), n, offsets, data, None, 0)
    if not non_ascii:
        return keys
    try:
        keys.validate(full=True)
        return keys
    except pa.ArrowInvalid:  # Java decodes header keys leniently: malformed UTF-8 becomes U+FFFD
        raw = _binary(pa.binary(), n, offsets, data, None, 0)
        return pa.array([b.decode("utf-8", errors="replace") for b in raw.to_pylist()], pa.string())


def topic_array(topic: str, n: int) -> pa.Array:
    encoded = topic.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(encoded))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * n)])


def build_batch(
    topic: str,
    partition: int,
    n: int,
    out_i64: Arr,
    out_i32: Arr,
    key_data: Arr,
    val_data: Arr,
    hk_offsets: Arr,
    hk_data: Arr,
    hv_offsets: Arr,
    hv_data: Arr,
    hv_valid: Arr,
    counters: Arr,
) -> pa.RecordBatch:
    """One RecordBatch from the outputs of :func:`rlm.log._kernel.decode_v2`."""
    nh, kd, vd, hkd, hvd, key_nulls, val_nulls, hv_nulls, non_ascii = (int(x) for x in counters[1:10])
    key = _binary(pa.binary(), n, trim(out_i32[0], n + 1), trim(key_data, kd), out_i32[3, :n], key_nulls)
    value = _binary(pa.binary(), n, trim(out_i32[1], n + 1), trim(val_data, vd), out_i32[4, :n], val_nulls)
    hkeys = _header_keys(nh, trim(hk_offsets, nh + 1), trim(hk_data, hkd), bool(non_ascii))
    hvals = _binary(pa.binary(), nh, trim(hv_offsets, nh + 1), trim(hv_data, hvd), hv_valid[:nh], hv_nulls)
    structs = pa.StructArray.from_arrays([hkeys, hvals], fields=list(HEADER_STRUCT))
    headers = pa.Array.from_buffers(
        KAFKA_SCHEMA.field("headers").type,
        n,
        [None, pa.py_buffer(trim(out_i32[2], n + 1))],
        children=[structs],
    )
    columns = [
        key,
        value,
        topic_array(topic, n),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.full(n, partition, np.int32))]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(trim(out_i64[0], n))]),
        pa.Array.from_buffers(pa.timestamp("ms"), n, [None, pa.py_buffer(trim(out_i64[1], n))]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(trim(out_i32[5], n))]),
        headers,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=KAFKA_SCHEMA)


def records_batch(topic: str, partition: int, records: Sequence[Record]) -> pa.RecordBatch:
    """A RecordBatch from decoded :class:`Record` objects (legacy entries: the slow path)."""
    return pa.RecordBatch.from_pydict(
        {
            "key": [r.key for r in records],
            "value": [r.value for r in records],
            "topic": [topic] * len(records),
            "partition": [partition] * len(records),
            "offset": [r.offset for r in records],
            "timestamp": [r.timestamp for r in records],
            "timestampType": [int(r.timestamp_type) for r in records],
            "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in records],
        },
        schema=KAFKA_SCHEMA,
    )
