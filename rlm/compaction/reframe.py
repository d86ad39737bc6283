"""Re-frame the retained records of a batch: original record bytes, new timestamp deltas.

``MemoryRecords.filterTo`` (``buildRetainedRecordsInto``) rebuilds a batch that lost records,
or that needs a delete horizon, with a ``MemoryRecordsBuilder`` on the original base offset (the
last offset is overridden to the original's, keeping the producer's last sequence): every
retained record keeps its offset delta, key, value and headers, and gets a timestamp delta
relative to the new batch's base timestamp, which is the first retained record's timestamp, or
the delete horizon when one is set (KIP-534). With LOG_APPEND_TIME a record's timestamp is the
batch's append time. So a retained record differs from its original bytes only in its length
and timestamp-delta varints; this kernel copies the rest verbatim (headers stay byte-exact,
whatever their encoding) in one compiled call per batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from rlm.compaction.errors import CompactionError

__all__ = ["NO_BASE", "reframe_records"]

Arr = np.ndarray[Any, Any]
NO_BASE = -(2**63)  # "base timestamp = first retained record's timestamp"


@njit(cache=True, nogil=True, inline="always")
def _read_varlong(buf: Any, pos: Any, end: Any) -> Any:  # pragma: no cover - jitted
    raw = np.uint64(0)
    shift = 0
    while True:
        if pos >= end or shift > 63:
            return np.int64(0), np.int64(-1)
        b = buf[pos]
        pos += 1
        raw |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            break
        shift += 7
    value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
    return value, np.int64(pos)


@njit(cache=True, nogil=True, inline="always")
def _write_varlong(value: Any, out: Any, pos: Any) -> Any:  # pragma: no cover - jitted
    zz = (np.uint64(value) << np.uint64(1)) ^ np.uint64(value >> 63)
    while zz >= np.uint64(0x80):
        out[pos] = np.uint8((zz & np.uint64(0x7F)) | np.uint64(0x80))
        pos += 1
        zz >>= np.uint64(7)
    out[pos] = np.uint8(zz)
    return pos + 1


@njit(cache=True, nogil=True)
def _reframe(payload: Any, count: Any, keep: Any, old_base: Any, append_time: Any, new_base: Any,
             out: Any) -> Any:  # pragma: no cover - jitted
    """Returns (bytes written, base timestamp used, max retained timestamp, records kept, status)."""
    end = payload.shape[0]
    pos = np.int64(0)
    # first pass: the first retained record's timestamp, when the base is not given
    starts = np.empty(count + 1, np.int64)
    abs_ts = np.empty(count, np.int64)
    for i in range(count):
        starts[i] = pos
        length, p = _read_varlong(payload, pos, end)
        if p < 0 or length < 0 or p + length > end:
            return 0, 0, 0, 0, 1
        rec_end = p + length
        p += 1  # attributes
        delta, p = _read_varlong(payload, p, rec_end)
        if p < 0:
            return 0, 0, 0, 0, 1
        abs_ts[i] = append_time if append_time >= 0 else old_base + delta
        pos = rec_end
    starts[count] = pos
    base = new_base
    max_ts = np.int64(-1)
    kept = 0
    for i in range(count):
        if keep[i]:
            if base == NO_BASE:
                base = abs_ts[i]
            if abs_ts[i] > max_ts:
                max_ts = abs_ts[i]
            kept += 1
    o = np.int64(0)
    tmp = np.empty(32, np.uint8)
    for i in range(count):
        if not keep[i]:
            continue
        s = starts[i]
        length, p = _read_varlong(payload, s, end)
        rec_end = p + length
        attr = payload[p]
        p += 1
        _, p = _read_varlong(payload, p, rec_end)
        # body = attributes, new timestamp delta, then the rest of the record verbatim
        t = _write_varlong(abs_ts[i] - base, tmp, 0)
        body_len = 1 + t + (rec_end - p)
        o = _write_varlong(np.int64(body_len), out, o)
        out[o] = attr
        o += 1
        for j in range(t):
            out[o + j] = tmp[j]
        o += t
        n = rec_end - p
        out[o:o + n] = payload[p:rec_end]
        o += n
    return o, base, max_ts, kept, 0


def reframe_records(payload: bytes | memoryview, count: int, keep: Arr, *, old_base_timestamp: int,
                    log_append_time: int | None,
                    new_base_timestamp: int = NO_BASE) -> tuple[bytes, int, int, int]:
    """The retained records of an uncompressed records region, re-framed.

    Returns ``(records bytes, base timestamp, max retained timestamp, retained count)``. The
    base is ``new_base_timestamp`` (a delete horizon) or, with :data:`NO_BASE`, the first
    retained record's timestamp.
    """
    buf = np.frombuffer(payload, dtype=np.uint8) if len(payload) else np.zeros(1, np.uint8)[:0]
    out = np.empty(len(payload) + 20 * count + 16, np.uint8)
    n, base, max_ts, kept, status = _reframe(
        buf, count, np.ascontiguousarray(keep, np.bool_), np.int64(old_base_timestamp),
        np.int64(-1 if log_append_time is None else log_append_time), np.int64(new_base_timestamp), out)
    if status:
        raise CompactionError("a batch's records region is malformed (record length or varint out of bounds)")
    return out[:n].tobytes(), int(base), int(max_ts), int(kept)
