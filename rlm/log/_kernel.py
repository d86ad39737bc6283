"""Compiled inner loops of the Arrow decoder: walk entry headers, decode v2 records into Arrow buffers.

Everything per record runs here, under numba (``@njit(cache=True)``), over a ``uint8`` view of
the mapped file; Python only loops per *batch* (CRC, decompression). The same source also runs
as plain Python, giving identical results: set ``RLM_DISABLE_JIT=1`` before import, or call
:func:`load_pure` for an un-jitted copy of this module (used by the equivalence test). In that
mode the byte buffers are ``memoryview`` objects and all arithmetic is on ``numpy.int64``
scalars, so 64-bit wrap-around matches the compiled code.

The checks mirror Java's ``DefaultRecord.readFrom``/``DefaultRecordBatch`` iterator; a failure
returns an error code and byte position instead of raising (numba cannot build our exceptions).

numba's on-disk cache is keyed on this file only: after editing :mod:`rlm.log._intrinsics`, touch
this file (or delete ``rlm/log/__pycache__/_kernel.*.nb*``) so the kernels are recompiled.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar, cast

import numpy as np

PURE: bool = bool(globals().get("_FORCE_PURE")) or os.environ.get("RLM_DISABLE_JIT") == "1"

F = TypeVar("F", bound=Callable[..., Any])


def _jit(fn: F) -> F:
    """``numba.njit(cache=True)`` unless the pure-Python mode is on."""
    if PURE:
        return fn
    from numba import njit

    return cast(F, njit(cache=True, nogil=True)(fn))


# Columns of the entry table filled by scan_entries.
POS, SIZE, MAGIC, ATTR, BASE_OFFSET, LAST_DELTA, BASE_TS, MAX_TS, COUNT, CRC = range(10)
META_COLS = 10

# scan_entries status
ST_DONE, ST_MORE, ST_SMALL_ENTRY, ST_BAD_MAGIC, ST_SMALL_BATCH, ST_BAD_COUNT = range(6)

# decode_v2 error codes
E_OK, E_VARINT, E_RECORD_SIZE, E_EOF, E_REMAINING, E_HEADER_COUNT, E_HEADER_KEY, E_FIELD, E_SIZE_MISMATCH = (
    range(9)
)
ERRORS = {
    E_VARINT: "malformed varint (too long or past the end of the record)",
    E_RECORD_SIZE: "invalid record size",
    E_EOF: "incorrect declared batch size, premature EOF reached",
    E_REMAINING: "incorrect declared batch size, records still remaining",
    E_HEADER_COUNT: "invalid number of record headers",
    E_HEADER_KEY: "invalid record header key size",
    E_FIELD: "key, value or header runs past the end of its record",
    E_SIZE_MISMATCH: "record size does not match the bytes its fields take",
}

if PURE:
    from rlm.log._intrinsics import pure_copy as _copy
    from rlm.log._intrinsics import pure_view as _view
else:
    from rlm.log._intrinsics import jit_copy as _copy
    from rlm.log._intrinsics import jit_view as _view


@_jit
def _u8(buf: Any, p: Any) -> Any:
    return np.int64(buf[p])


@_jit
def _be32(buf: Any, p: Any) -> Any:
    v = (_u8(buf, p) << 24) | (_u8(buf, p + 1) << 16) | (_u8(buf, p + 2) << 8) | _u8(buf, p + 3)
    if v >= 2147483648:
        v -= 4294967296
    return v


@_jit
def _be64(buf: Any, p: Any) -> Any:
    low = _be32(buf, p + 4)
    if low < 0:
        low += 4294967296
    return _be32(buf, p) * 4294967296 + low


@_jit
def _be16(buf: Any, p: Any) -> Any:
    v = (_u8(buf, p) << 8) | _u8(buf, p + 1)
    if v >= 32768:
        v -= 65536
    return v


@_jit
def scan_entries(
    buf: Any, pos: Any, end: Any, meta: Any, max_rows: Any, max_bytes: Any, max_zbytes: Any
) -> Any:
    """Walk entry headers from ``pos`` like ``FileLogInputStream.nextBatch``; fill ``meta`` rows.

    Stops before an entry that would take the group past ``max_rows`` records, ``max_bytes``
    entry bytes or ``max_zbytes`` compressed entry bytes (a group has at least one entry) with
    ``ST_MORE``, at the end or a partial tail with ``ST_DONE``, or on a malformed header with an
    error status. Returns ``(entries, next position, status, detail)``.
    """
    n = 0
    rows = np.int64(0)
    nbytes = np.int64(0)
    zbytes = np.int64(0)
    cap = meta.shape[0]
    while True:
        if pos + 17 >= end:
            return n, pos, ST_DONE, 0
        if n >= cap:
            return n, pos, ST_MORE, 0
        size = _be32(buf, pos + 8)
        if size < 14:
            return n, pos, ST_SMALL_ENTRY, size
        if pos + 12 + size > end:
            return n, pos, ST_DONE, 0
        magic = _u8(buf, pos + 16)
        count = np.int64(1)
        if magic >= 2:
            if magic > 2:
                return n, pos, ST_BAD_MAGIC, magic
            if size + 12 < 61:
                return n, pos, ST_SMALL_BATCH, size + 12
            count = _be32(buf, pos + 57)
            if count < 0:
                return n, pos, ST_BAD_COUNT, count
            zsize = size + 12 if _u8(buf, pos + 22) & 7 else 0
        else:
            zsize = size + 12 if _u8(buf, pos + 17) & 7 else 0
        if n > 0 and (
            rows + count > max_rows
            or nbytes + size + 12 > max_bytes
            or (zsize and zbytes + zsize > max_zbytes)
        ):
            return n, pos, ST_MORE, 0
        meta[n, POS] = pos
        meta[n, SIZE] = size + 12
        meta[n, MAGIC] = magic
        meta[n, BASE_OFFSET] = _be64(buf, pos)
        meta[n, COUNT] = count
        if magic >= 2:
            crc = _be32(buf, pos + 17)
            meta[n, CRC] = crc + 4294967296 if crc < 0 else crc
            meta[n, ATTR] = _be16(buf, pos + 21)
            meta[n, LAST_DELTA] = _be32(buf, pos + 23)
            meta[n, BASE_TS] = _be64(buf, pos + 27)
            meta[n, MAX_TS] = _be64(buf, pos + 35)
        else:
            meta[n, ATTR] = _u8(buf, pos + 17)
            meta[n, CRC] = 0
            meta[n, LAST_DELTA] = 0
            meta[n, BASE_TS] = -1
            meta[n, MAX_TS] = -1
        rows += count
        nbytes += size + 12
        zbytes += zsize
        n += 1
        pos += 12 + size


@_jit
def _varint(buf: Any, pos: Any, end: Any) -> Any:
    """Zig-zag varint (Java ``readVarint``: at most 5 bytes); returns (value, next pos, ok)."""
    if pos < end:
        first = _u8(buf, pos)
        if first < 0x80:  # one-byte fast path: most lengths and deltas
            return (first >> 1) ^ -(first & 1), pos + 1, True
    raw = np.int64(0)
    shift = 0
    while True:
        if pos >= end:
            return raw, pos, False
        b = _u8(buf, pos)
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            return raw, pos, False
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos, True


@_jit
def _varlong(buf: Any, pos: Any, end: Any) -> Any:
    """Zig-zag varlong (Java ``readVarlong``: at most 10 bytes), wrapping like Java's ``long``."""
    if pos < end:
        first = _u8(buf, pos)
        if first < 0x80:
            return (first >> 1) ^ -(first & 1), pos + 1, True
    lo = np.int64(0)
    hi = np.int64(0)
    shift = 0
    while True:
        if pos >= end:
            return lo, pos, False
        b = _u8(buf, pos)
        pos += 1
        if shift < 63:
            lo |= (b & 0x7F) << shift
        else:
            hi = b & 1
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            return lo, pos, False
    u = (lo >> 1) | (hi << 62)
    return u ^ -(lo & 1), pos, True


@_jit
def decode_v2(
    b_addr: Any,
    b_len: Any,
    b_base_offset: Any,
    b_base_ts: Any,
    b_count: Any,
    b_log_append: Any,
    b_max_ts: Any,
    min_offset: Any,
    max_offset: Any,
    out_i64: Any,
    out_i32: Any,
    key_data: Any,
    val_data: Any,
    hk_offsets: Any,
    hk_data: Any,
    hv_offsets: Any,
    hv_data: Any,
    hv_valid: Any,
    counters: Any,
) -> Any:
    """Decode the records of every batch into Arrow-ready buffers, keeping offsets in [min, max).

    Per batch: its records are the ``b_len`` bytes at address ``b_addr`` (inside the mapped file,
    or a decompressed payload the caller keeps alive); with ``b_log_append`` set every record
    takes ``b_max_ts``. Error positions are relative to that payload.
    Per kept row: ``out_i64[0|1, r]`` = offset, timestamp; ``out_i32[0..2, r+1]`` = end offsets of
    key, value and header list (row 0 holds 0), ``out_i32[3|4, r]`` = key/value validity,
    ``out_i32[5, r]`` = timestamp type. ``counters`` returns rows, headers, byte totals, null counts
    and a non-ASCII flag for header keys; it also holds them on entry, so successive calls append to
    the same buffers. Returns ``(error code, batch index, byte position)``.
    """
    rows = counters[0]
    nh_total = counters[1]
    kd = counters[2]
    vd = counters[3]
    hkd = counters[4]
    hvd = counters[5]
    key_nulls = counters[6]
    val_nulls = counters[7]
    hv_nulls = counters[8]
    non_ascii = counters[9]
    if rows == 0:
        out_i32[0, 0] = 0
        out_i32[1, 0] = 0
        out_i32[2, 0] = 0
    if nh_total == 0:
        hk_offsets[0] = 0
        hv_offsets[0] = 0
    for i in range(b_addr.shape[0]):
        end = b_len[i]
        buf = _view(b_addr[i], end)
        pos = end - end  # 0, typed like ``end``
        base_offset = b_base_offset[i]
        base_ts = b_base_ts[i]
        log_append = b_log_append[i] != 0
        max_ts = b_max_ts[i]
        ts_type = 1 if log_append else 0
        for _r in range(b_count[i]):
            if pos >= end:
                return E_EOF, i, pos
            body, pos, ok = _varint(buf, pos, end)
            if not ok:
                return E_VARINT, i, pos
            if body < 1 or pos + body > end:
                return E_RECORD_SIZE, i, pos
            rend = pos + body
            pos += 1  # attributes, unused
            ts_delta, pos, ok = _varlong(buf, pos, rend)
            if not ok:
                return E_VARINT, i, pos
            offset_delta, pos, ok = _varint(buf, pos, rend)
            if not ok:
                return E_VARINT, i, pos
            klen, pos, ok = _varint(buf, pos, rend)
            if not ok:
                return E_VARINT, i, pos
            kpos = pos
            if klen > 0:
                if pos + klen > rend:
                    return E_FIELD, i, pos
                pos += klen
            vlen, pos, ok = _varint(buf, pos, rend)
            if not ok:
                return E_VARINT, i, pos
            vpos = pos
            if vlen > 0:
                if pos + vlen > rend:
                    return E_FIELD, i, pos
                pos += vlen
            nh, pos, ok = _varint(buf, pos, rend)
            if not ok:
                return E_VARINT, i, pos
            if nh < 0 or nh > rend - pos:
                return E_HEADER_COUNT, i, pos
            offset = base_offset + offset_delta
            keep = offset >= min_offset and offset < max_offset
            for _h in range(nh):
                hklen, pos, ok = _varint(buf, pos, rend)
                if not ok:
                    return E_VARINT, i, pos
                if hklen < 0 or pos + hklen > rend:
                    return E_HEADER_KEY, i, pos
                hkpos = pos
                pos += hklen
                hvlen, pos, ok = _varint(buf, pos, rend)
                if not ok:
                    return E_VARINT, i, pos
                hvpos = pos
                if hvlen > 0:
                    if pos + hvlen > rend:
                        return E_FIELD, i, pos
                    pos += hvlen
                if keep:
                    for j in range(hklen):
                        c = buf[hkpos + j]
                        hk_data[hkd + j] = c
                        if c >= 0x80:
                            non_ascii = 1
                    hkd += hklen
                    hk_offsets[nh_total + 1] = hkd
                    if hvlen >= 0:
                        _copy(hv_data, hvd, buf, hvpos, hvlen)
                        hvd += hvlen
                        hv_valid[nh_total] = 1
                    else:
                        hv_valid[nh_total] = 0
                        hv_nulls += 1
                    hv_offsets[nh_total + 1] = hvd
                    nh_total += 1
            if pos != rend:
                return E_SIZE_MISMATCH, i, pos
            if not keep:
                continue
            out_i64[0, rows] = offset
            out_i64[1, rows] = max_ts if log_append else base_ts + ts_delta
            if klen >= 0:
                _copy(key_data, kd, buf, kpos, klen)
                kd += klen
                out_i32[3, rows] = 1
            else:
                out_i32[3, rows] = 0
                key_nulls += 1
            if vlen >= 0:
                _copy(val_data, vd, buf, vpos, vlen)
                vd += vlen
                out_i32[4, rows] = 1
            else:
                out_i32[4, rows] = 0
                val_nulls += 1
            out_i32[5, rows] = ts_type
            rows += 1
            out_i32[0, rows] = kd
            out_i32[1, rows] = vd
            out_i32[2, rows] = nh_total
        if pos != end:
            return E_REMAINING, i, pos
    counters[0] = rows
    counters[1] = nh_total
    counters[2] = kd
    counters[3] = vd
    counters[4] = hkd
    counters[5] = hvd
    counters[6] = key_nulls
    counters[7] = val_nulls
    counters[8] = hv_nulls
    counters[9] = non_ascii
    return E_OK, 0, 0


def load_pure() -> ModuleType:
    """A fresh, un-jitted copy of this module (for tests comparing both paths)."""
    name = __name__ + "_pure"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, __file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__["_FORCE_PURE"] = True
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
