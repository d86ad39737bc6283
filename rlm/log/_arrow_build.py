"""Assemble Arrow arrays with the Kafka-source schema from the buffers the kernel filled.

Arrays are made with ``from_buffers`` over numpy memory, with no per-row Python work. Output
buffers are allocated at an upper bound (payload size) and trimmed here: a buffer less than half
used is copied to its exact size so that the table does not pin mostly-empty allocations.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from rlm.log import _recycle
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


def pool_empty(shape: int | tuple[int, ...], dtype: type[np.generic], *, sparse: bool = False) -> Arr:
    """An uninitialised array: large ones in recycled warm mappings (:mod:`rlm.log._recycle`:
    a process decoding segment after segment reuses pages instead of faulting in and zeroing
    fresh ones), small ones in Arrow's memory pool."""
    return _recycle.empty(shape, dtype, sparse=sparse)  # type: ignore[no-any-return]


def trim(arr: Arr, n: int) -> Arr:
    """``arr[:n]``, copied (into Arrow's pool) when that uses less than half of ``arr``.

    A recycled mapping is never copied: its untouched capacity holds no memory, and the whole
    mapping goes back to the recycling pool when the last array using it dies.
    """
    part = arr[:n]
    if n >= arr.shape[0] // 2 or _recycle.recycled(arr):
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


def _filled(n: int, value: int) -> Arr:
    out = pool_empty(n, np.int32)
    out.fill(value)
    return out


_TOPIC_ARRAYS: OrderedDict[str, pa.Array] = OrderedDict()
_TOPIC_CACHE = 8  # topics whose column is kept (a few MiB each at 2^20 rows)
_TOPIC_LOCK = threading.Lock()


def topic_array(topic: str, n: int) -> pa.Array:
    """The ``topic`` column of ``n`` rows: a slice of one array built per topic and reused.

    Building it costs ~5 ms per million rows, a few percent of a whole decode; the arrays are
    immutable, so every batch of a topic can share one (only the last few topics are kept).
    """
    with _TOPIC_LOCK:
        cached = _TOPIC_ARRAYS.get(topic)
        if cached is None or len(cached) < n:
            cached = _build_topic_array(topic, max(n, 1024))
            _TOPIC_ARRAYS[topic] = cached
            while len(_TOPIC_ARRAYS) > _TOPIC_CACHE:
                _TOPIC_ARRAYS.popitem(last=False)
        else:
            _TOPIC_ARRAYS.move_to_end(topic)
    return cached.slice(0, n)


def _build_topic_array(topic: str, n: int) -> pa.Array:
    encoded = topic.encode()
    offsets = pool_empty(n + 1, np.int32)
    np.multiply(np.arange(n + 1, dtype=np.int32), np.int32(len(encoded)), out=offsets)
    data = pool_empty(n * len(encoded), np.uint8)
    if encoded:
        data.reshape(n, len(encoded))[:] = np.frombuffer(encoded, np.uint8)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


class Outputs:
    """Arrow-ready output buffers that :func:`rlm.log._kernel.decode_v2` appends to, group after group.

    Capacities are upper bounds: ``rows_cap`` rows and ``bytes_cap`` bytes for each of the key,
    value, header-key and header-value data (each is at most the decoded payload size), headers
    at most one per two payload bytes. Untouched capacity costs no memory (the pool maps lazily)
    and :meth:`to_batch` trims what is mostly unused.
    """

    def __init__(self, rows_cap: int, bytes_cap: int) -> None:
        self.rows_cap = rows_cap
        self.bytes_cap = bytes_cap
        self.headers_cap = bytes_cap // 2 + 2
        self.out_i64 = pool_empty((2, rows_cap), np.int64)
        self.out_i32 = pool_empty((6, rows_cap + 1), np.int32)
        # Largest writer first: a recycled pool hands out the most-written idle mapping first,
        # so the value data (most of the bytes) gets the warmest one (see _recycle.RecyclePool._take).
        self.val_data = pool_empty(bytes_cap, np.uint8, sparse=True)
        self.hv_data = pool_empty(bytes_cap, np.uint8, sparse=True)
        self.key_data = pool_empty(bytes_cap, np.uint8, sparse=True)
        self.hk_data = pool_empty(bytes_cap, np.uint8, sparse=True)
        self.hk_offsets = pool_empty(self.headers_cap, np.int32, sparse=True)
        self.hv_offsets = pool_empty(self.headers_cap, np.int32, sparse=True)
        self.hv_valid = pool_empty(self.headers_cap, np.uint8, sparse=True)
        self.counters = np.zeros(10, np.int64)

    @property
    def rows(self) -> int:
        return int(self.counters[0])

    def fits(self, rows: int, payload: int) -> bool:
        """Whether a group of ``rows`` records in ``payload`` decoded bytes surely fits."""
        used = int(self.counters[2:6].max())
        return (
            self.rows + rows <= self.rows_cap
            and used + payload <= self.bytes_cap
            and int(self.counters[1]) + payload // 2 + 1 <= self.headers_cap - 1
        )

    def kernel_args(self) -> tuple[Arr, ...]:
        return (
            self.out_i64,
            self.out_i32,
            self.key_data,
            self.val_data,
            self.hk_offsets,
            self.hk_data,
            self.hv_offsets,
            self.hv_data,
            self.hv_valid,
            self.counters,
        )

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        """The rows decoded so far as one RecordBatch (the buffers then belong to it)."""
        n = self.rows
        nh, kd, vd, hkd, hvd, key_nulls, val_nulls, hv_nulls, non_ascii = (
            int(x) for x in self.counters[1:10]
        )
        i32, i64 = self.out_i32, self.out_i64
        used = ((self.key_data, kd), (self.val_data, vd), (self.hk_data, hkd), (self.hv_data, hvd),
                (self.hk_offsets, 4 * (nh + 1)), (self.hv_offsets, 4 * (nh + 1)), (self.hv_valid, nh))
        for arr, nbytes in used:
            _recycle.note_used(arr, nbytes)
        key = _binary(pa.binary(), n, trim(i32[0], n + 1), trim(self.key_data, kd), i32[3, :n], key_nulls)
        value = _binary(pa.binary(), n, trim(i32[1], n + 1), trim(self.val_data, vd), i32[4, :n], val_nulls)
        hkeys = _header_keys(nh, trim(self.hk_offsets, nh + 1), trim(self.hk_data, hkd), bool(non_ascii))
        hvals = _binary(
            pa.binary(),
            nh,
            trim(self.hv_offsets, nh + 1),
            trim(self.hv_data, hvd),
            self.hv_valid[:nh],
            hv_nulls,
        )
        structs = pa.StructArray.from_arrays([hkeys, hvals], fields=list(HEADER_STRUCT))
        headers = pa.Array.from_buffers(
            KAFKA_SCHEMA.field("headers").type,
            n,
            [None, pa.py_buffer(trim(i32[2], n + 1))],
            children=[structs],
        )
        columns = [
            key,
            value,
            topic_array(topic, n),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(_filled(n, partition))]),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(trim(i64[0], n))]),
            pa.Array.from_buffers(pa.timestamp("ms"), n, [None, pa.py_buffer(trim(i64[1], n))]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(trim(i32[5], n))]),
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
