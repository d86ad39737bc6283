"""Decode ``.log`` data to Arrow with the schema of Spark's Kafka source.

Rows are data records only: control records (transaction markers) are not rows, while records of
aborted transactions *are* rows, as Spark's Kafka source returns them under
``isolation.level=read_uncommitted`` (filter with the aborted-transaction list for
read_committed). With LOG_APPEND_TIME every record's timestamp is its batch's max timestamp.

How it is fast: entry headers are walked by a compiled kernel over the file's bytes, and a group
of batches is then CRC-checked and decoded by two more compiled calls (see :mod:`rlm.log._kernel`)
straight into Arrow buffers: uncompressed records are read in place, zstd batches are
decompressed by libzstd, called from the compiled loop (:mod:`rlm.log._zstd`), into a small
scratch buffer and decoded while still in cache. Python acts only at group boundaries, when an
output buffer is full, and for what the compiled loop leaves to it: other codecs (decompressed
per batch from Python, then decoded by the same kernel), zstd without a usable libzstd, frames
libzstd rejects or that might exceed the decompression cap (the Python path then raises the
typed error), and legacy magic 0/1 entries (the slow per-record path).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

from rlm.errors import CorruptRecordError, CrcMismatchError
from rlm.log import _kernel, _libdeflate, _lz4, _zstd, codecs
from rlm.log._arrow_build import KAFKA_SCHEMA, Outputs, records_batch
from rlm.log._crc import CRC32C_VALUE, bytes_address, crc32c
from rlm.log.legacy import legacy_records
from rlm.log.model import ATTR_CONTROL, ATTR_TIMESTAMP_TYPE, RECORD_BATCH_OVERHEAD, Compression
from rlm.log.source import FileWindow, Source, open_window, source_name

__all__ = ["KAFKA_SCHEMA", "iter_arrow_batches", "read_arrow"]

_SCAN_ERRORS = {
    _kernel.ST_SMALL_ENTRY: "entry size {} is smaller than the minimum 14",
    _kernel.ST_BAD_MAGIC: "unsupported record batch magic {}",
    _kernel.ST_SMALL_BATCH: "record batch size {} is smaller than the minimum 61",
    _kernel.ST_BAD_COUNT: "invalid record count {}",
}
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_GROUP_BYTES = 64 * 1024 * 1024  # entries per kernel call (uncompressed: read in place)
_GROUP_ZBYTES = 1024 * 1024  # compressed entries per kernel call (their payloads are decompressed)
_MAX_BUFFER = 2**31 - 1  # Arrow binary offsets are int32
_SCRATCH_MIN = 256 * 1024  # first scratch buffer for zstd output: two 128 KiB blocks
_CRC_ADDRESS = int(ctypes.cast(CRC32C_VALUE, ctypes.c_void_p).value or 0) if CRC32C_VALUE else 0
_READ_ROWS = 1 << 20
_PathArg = str | os.PathLike[str] | None
Arr = np.ndarray[Any, Any]


class _Decoder:
    """State of one decode: the source view, the kernels to use and the row filter."""

    def __init__(
        self,
        view: memoryview,
        *,
        kern: ModuleType,
        path: str | None,
        topic: str,
        partition: int,
        start_offset: int | None,
        end_offset: int | None,
        verify_crc: bool,
    ) -> None:
        self.kern = kern
        self.path = path
        self.topic = topic
        self.partition = partition
        self.lo = _I64_MIN if start_offset is None else start_offset
        self.hi = _I64_MAX if end_offset is None else end_offset
        self.verify_crc = verify_crc
        self.view = view
        self.arr: Arr = np.frombuffer(view, dtype=np.uint8) if len(view) else np.zeros(0, np.uint8)
        self.arr.setflags(write=False)  # one kernel signature whatever the source
        # The compiled kernels read a numpy view; the pure-Python copy reads the memoryview.
        self.fbuf: Any = view if kern.PURE else self.arr
        self.base_address = int(self.arr.ctypes.data)
        self.zstd_fast = codecs.ZstdFastPath()
        self.out: Outputs | None = None  # the RecordBatch being filled
        self.max_rows = 1
        # libzstd for the compiled loop: a decompression context of our own, and scratch space
        self.max_decompressed = codecs.MAX_DECOMPRESSED_BYTES
        self.pool = _zstd.pool()
        self.zstd_fn = self.pool.lib.decompress_dctx if self.pool is not None else 0
        self.dctx = 0
        self.lz4_fn = _lz4.decompress_address()  # liblz4, stateless: nothing to lend
        # libdeflate for gzip: a decompressor of our own, and the two sizes it reports
        self.gzip_pool = _libdeflate.pool()
        self.gzip_fn = self.gzip_pool.lib.gzip_decompress_ex if self.gzip_pool is not None else 0
        self.gzip_decompressor = 0
        self.gzip_sizes: Arr = np.zeros(2, np.int64)
        # codecs the compiled loop decompresses itself (bit ``1 << codec``)
        # snappy needs no library, but un-jitted its byte loop would be far slower than cramjam
        self.snappy = not kern.PURE
        self.fused = (
            (1 << Compression.ZSTD if self.zstd_fn else 0)
            | (1 << Compression.LZ4 if self.lz4_fn else 0)
            | (1 << Compression.SNAPPY if self.snappy else 0)
            | (1 << Compression.GZIP if self.gzip_fn else 0)
        )
        self.scratch: Arr = np.zeros(0, np.uint8)
        self.crc_fn = _CRC_ADDRESS if verify_crc else 0  # CRC-32C checked inside the compiled loop

    def close(self) -> None:
        """Give the decompression contexts back (the decoder is not used afterwards)."""
        if self.pool is not None and self.dctx:
            self.pool.release(self.dctx)
            self.dctx = 0
        if self.gzip_pool is not None and self.gzip_decompressor:
            self.gzip_pool.release(self.gzip_decompressor)
            self.gzip_decompressor = 0

    def groups(self, max_rows: int, window: FileWindow | None = None) -> Iterator[Arr]:
        """Entry tables (``meta`` rows) of consecutive groups of entries.

        A group holds at most ``max_rows`` records and about 1 MiB of compressed entries, so
        that its decompressed payloads stay in the CPU cache until the kernel has read them
        and their memory is reused by the next group (instead of page-faulting fresh memory).
        With a file ``window``, a group ends where the bytes read so far end; an entry cut by
        that end is read whole before the scan goes on, and decoded groups are released.
        """
        meta = np.empty((max(1, min(max_rows, 65536)), _kernel.META_COLS), np.int64)
        pos, size = 0, len(self.view)
        end = size if window is None else window.ensure(1)
        while True:
            if window is not None:
                window.release(pos)
            n, pos, status, detail = self.kern.scan_entries(
                self.fbuf,
                np.int64(pos),
                np.int64(end),
                meta,
                np.int64(max_rows),
                np.int64(_GROUP_BYTES),
                np.int64(_GROUP_ZBYTES),
                np.int64(self.fused),
            )
            pos = int(pos)
            if n:
                yield meta[:n].copy()
            if status == _kernel.ST_DONE and window is not None and end < size:
                window.release(pos)  # first, so that the next window can reuse these pages
                end = window.ensure(max(pos + 12, end + 1))  # the next entry header, at least
                entry = int.from_bytes(self.view[pos + 8 : pos + 12], "big", signed=True)
                end = window.ensure(pos + 12 + entry)
                continue
            if status == _kernel.ST_DONE:
                return
            if status != _kernel.ST_MORE:
                raise CorruptRecordError(
                    _SCAN_ERRORS[int(status)].format(int(detail)), path=self.path, position=pos
                )

    def check_crcs(self, meta: Arr) -> None:
        """Verify the CRC-32C of every v2 batch of a group (one C call per batch, no copies)."""
        if _CRC_ADDRESS:  # all in one compiled call
            i = int(self.kern.check_crcs(meta, np.int64(self.base_address), np.int64(_CRC_ADDRESS)))
            if i >= 0:
                row = meta[i]
                self._crc_error(int(row[_kernel.POS]), int(row[_kernel.SIZE]), int(row[_kernel.CRC]))
            return
        v2 = meta[meta[:, _kernel.MAGIC] == 2]
        if not len(v2):
            return
        expected = v2[:, _kernel.CRC]
        positions = v2[:, _kernel.POS].tolist()
        sizes = v2[:, _kernel.SIZE].tolist()
        if CRC32C_VALUE is not None:
            fn, base = CRC32C_VALUE, self.base_address + 21
            actual = [fn(base + p, s - 21) for p, s in zip(positions, sizes, strict=True)]
        else:
            actual = [crc32c(self.view[p + 21 : p + s]) for p, s in zip(positions, sizes, strict=True)]
        mismatches = np.flatnonzero(np.asarray(actual, np.int64) != expected)
        if len(mismatches):
            i = int(mismatches[0])
            self._crc_error(positions[i], sizes[i], int(expected[i]))

    def _crc_error(self, pos: int, size: int, expected: int) -> None:
        actual = crc32c(self.view[pos + 21 : pos + size])
        raise CrcMismatchError(
            f"record batch crc {expected:#010x} does not match content ({actual:#010x})",
            path=self.path,
            position=pos,
        )

    def decode(self, max_rows: int, window: FileWindow | None = None) -> Iterator[pa.RecordBatch]:
        """RecordBatches of at most ``max_rows`` rows (more only for one bigger Kafka batch)."""
        self.out = None
        self.max_rows = max_rows
        for meta in self.groups(max_rows, window):
            yield from self._group(meta)
        if self.out is not None and self.out.rows:
            yield self.out.to_batch(self.topic, self.partition)

    def _group(self, meta: Arr) -> Iterator[pa.RecordBatch]:
        """Decode one group: runs of v2 batches through the kernel, legacy entries the slow way."""
        last = meta[:, _kernel.BASE_OFFSET] + meta[:, _kernel.LAST_DELTA]
        wanted = (meta[:, _kernel.COUNT] > 0) & (last >= self.lo) & (meta[:, _kernel.BASE_OFFSET] < self.hi)
        wanted &= (meta[:, _kernel.MAGIC] < 2) | ((meta[:, _kernel.ATTR] & ATTR_CONTROL) == 0)
        if self.verify_crc:
            # The batches decoded by the compiled loop are checked there, one by one, right before
            # they are decompressed or decoded (their bytes then come from the cache); the others now.
            self.check_crcs(meta if not self.crc_fn else meta[~wanted])
        meta = meta[wanted]
        if not len(meta):
            return
        legacy = meta[:, _kernel.MAGIC] < 2
        # runs of legacy or v2 entries, found by numpy: a group holds thousands of batches, and a
        # Python loop comparing them one by one cost 13 % of an uncompressed file's decode
        cuts = (np.flatnonzero(legacy[1:] != legacy[:-1]) + 1).tolist()
        for start, stop in zip([0, *cuts], [*cuts, len(meta)], strict=True):
            run = meta[start:stop]
            if legacy[start]:
                if self.out is not None and self.out.rows:  # keep file order
                    yield self.out.to_batch(self.topic, self.partition)
                self.out = None
                batch = self._legacy(run)
                if batch.num_rows:
                    yield batch
            else:
                yield from self._batches(run)

    def _legacy(self, run: Arr) -> pa.RecordBatch:
        records = []
        for pos, size in run[:, [_kernel.POS, _kernel.SIZE]].tolist():
            entry = self.view[pos : pos + size]
            records += [
                r
                for r in legacy_records(entry, path=self.path, position=pos, verify_crc=self.verify_crc)
                if self.lo <= r.offset < self.hi
            ]
        return records_batch(self.topic, self.partition, records)

    def _fusable(self, row: Arr) -> bool:
        """Whether the compiled loop decodes this batch itself (uncompressed; zstd, lz4, gzip with a
        library; snappy jitted)."""
        codec = int(row[_kernel.ATTR]) & 0x07
        return codec == Compression.NONE or bool((self.fused >> codec) & 1)

    def _batches(self, run: Arr) -> Iterator[pa.RecordBatch]:
        """Decode a run of wanted v2 batches, mostly in compiled calls (see ``decode_batches``)."""
        i, n = 0, len(run)
        while i < n:
            out = self.out if self.out is not None else _NO_OUTPUT
            if self.zstd_fn and not self.dctx:
                assert self.pool is not None
                self.dctx = self.pool.acquire()
            if self.gzip_fn and not self.gzip_decompressor:
                assert self.gzip_pool is not None
                self.gzip_decompressor = self.gzip_pool.acquire()
            status, j, detail = self.kern.decode_batches(
                self.fbuf,
                np.int64(self.base_address),
                run,
                np.int64(i),
                np.int64(self.zstd_fn),
                np.int64(self.dctx),
                np.int64(self.lz4_fn),
                np.int64(self.snappy),
                np.int64(self.gzip_fn),
                np.int64(self.gzip_decompressor),
                self.gzip_sizes,
                np.int64(self.crc_fn),
                np.int64(self.scratch.ctypes.data),
                np.int64(len(self.scratch)),
                np.int64(self.max_decompressed),
                np.int64(self.lo),
                np.int64(self.hi),
                *out.kernel_args(),
            )
            status, j, detail = int(status), int(j), int(detail)
            if status == _kernel.E_OK:
                break
            if status == _kernel.F_FULL:
                if self.out is not None and self.out.rows:
                    yield self.out.to_batch(self.topic, self.partition)
                self.out = self._new_output(run, j, detail)
            elif status == _kernel.F_GROW:
                self.scratch = np.empty(max(detail, 2 * len(self.scratch), _SCRATCH_MIN), np.uint8)
            elif status == _kernel.F_PYTHON:
                stop = j + 1
                while stop < n and not self._fusable(run[stop]):
                    stop += 1
                if self.crc_fn:
                    self.check_crcs(run[j:stop])
                yield from self._v2(run[j:stop])
                j = stop
            elif status == _kernel.E_CRC:
                row = run[j]
                self._crc_error(int(row[_kernel.POS]), int(row[_kernel.SIZE]), int(row[_kernel.CRC]))
            elif status == _kernel.E_COUNT:
                raise CorruptRecordError(
                    f"record count {int(run[j, _kernel.COUNT])} cannot fit in {detail} bytes",
                    path=self.path,
                    position=int(run[j, _kernel.POS]),
                )
            else:
                self._raise(status, run, j, detail)
            i = j
        if self.out is not None and self.out.rows >= self.max_rows:
            yield self.out.to_batch(self.topic, self.partition)
            self.out = None

    def _new_output(self, run: Arr, i: int, payload: int) -> Outputs:
        """Outputs for ``max_rows`` rows (or batch ``i``'s, if more) at its bytes per record (+10%)."""
        rows = int(run[i, _kernel.COUNT])
        if payload >= _MAX_BUFFER:
            raise CorruptRecordError(
                "batch too large to decode into one Arrow batch",
                path=self.path,
                position=int(run[i, _kernel.POS]),
            )
        pos, size = int(run[i, _kernel.POS]), int(run[i, _kernel.SIZE])
        return self._outputs(rows, payload, pos, size)

    def _outputs(self, rows: int, payload: int, pos: int, size: int) -> Outputs:
        """Outputs for ``max_rows`` rows at this data's bytes per record (+10%), and no more bytes
        than the rest of the source can decode to.

        ``rows`` records decode to ``payload`` bytes from the ``size`` entry bytes at ``pos``.
        Why the second bound: capacity that stays unused is trimmed by a copy into fresh memory
        when the batch is emitted (:func:`rlm.log._arrow_build.trim`), and fresh memory costs a
        page fault and the kernel's zeroing per page; a whole-file read of a small segment used
        to copy all of its values once more that way. Uncompressed, the rest of the source bounds
        the payload exactly; compressed, it is estimated at this data's ratio (+25 %): a guess
        too small only means one more, smaller RecordBatch.
        """
        per_row = payload / max(rows, 1)
        cap = max(payload, per_row * max(self.max_rows, rows) * 1.1)
        rest = len(self.view) - pos
        ratio = payload / max(size - RECORD_BATCH_OVERHEAD, 1)
        cap = min(cap, max(payload, rest if ratio <= 1 else rest * ratio * 1.25))
        return Outputs(max(self.max_rows, rows), int(min(_MAX_BUFFER, cap)))

    def _payloads(self, run: Arr) -> tuple[Arr, Arr, list[bytes]]:
        """Address and length of every batch's records: in the mapped file, or decompressed.

        The kernel reads the payloads where they are; the decompressed ones are returned so that
        the caller keeps them alive while it runs (no copy into one big buffer).
        """
        b_addr = run[:, _kernel.POS] + (self.base_address + RECORD_BATCH_OVERHEAD)
        b_len = run[:, _kernel.SIZE] - RECORD_BATCH_OVERHEAD
        codecs_ = run[:, _kernel.ATTR] & 0x07
        which = np.flatnonzero(codecs_)
        keep: list[bytes] = []
        if not len(which):
            return b_addr, b_len, keep
        view, fast, zstd = self.view, self.zstd_fast, Compression.ZSTD
        for pos, size, codec in zip(
            run[which, _kernel.POS].tolist(),
            run[which, _kernel.SIZE].tolist(),
            codecs_[which].tolist(),
            strict=True,
        ):
            payload = view[pos + RECORD_BATCH_OVERHEAD : pos + size]
            raw = fast(payload) if codec == zstd else None
            if raw is None:
                raw = codecs.decompress(codec, payload, path=self.path, position=pos)
            keep.append(raw)
        b_addr[which] = [bytes_address(raw) for raw in keep]
        b_len[which] = [len(raw) for raw in keep]
        return b_addr, b_len, keep

    def _v2(self, run: Arr) -> Iterator[pa.RecordBatch]:
        """Decode a run of v2 batches, appending to the current output (emitted when full)."""
        b_addr, b_len, keep = self._payloads(run)
        counts = run[:, _kernel.COUNT]
        too_many = np.flatnonzero(counts > b_len)
        if len(too_many):
            i = int(too_many[0])
            raise CorruptRecordError(
                f"record count {int(counts[i])} cannot fit in {int(b_len[i])} bytes",
                path=self.path,
                position=int(run[i, _kernel.POS]),
            )
        payload = int(b_len.sum())
        rows = int(counts.sum())
        if payload >= _MAX_BUFFER:
            raise CorruptRecordError(
                "batch group too large to decode into one Arrow batch",
                path=self.path,
                position=int(run[0, _kernel.POS]),
            )
        if self.out is None or not self.out.fits(rows, payload):
            if self.out is not None and self.out.rows:
                yield self.out.to_batch(self.topic, self.partition)
            entry_bytes = int(run[:, _kernel.SIZE].sum()) - (len(run) - 1) * RECORD_BATCH_OVERHEAD
            self.out = self._outputs(rows, payload, int(run[0, _kernel.POS]), entry_bytes)
        log_append = ((run[:, _kernel.ATTR] & ATTR_TIMESTAMP_TYPE) != 0).astype(np.int64)
        # numpy scalars in the pure-Python kernel wrap around like the compiled code, quietly
        with np.errstate(over="ignore") if self.kern.PURE else contextlib.nullcontext():
            err, bi, epos = self.kern.decode_v2(
                b_addr,
                b_len,
                run[:, _kernel.BASE_OFFSET].copy(),
                run[:, _kernel.BASE_TS].copy(),
                counts.copy(),
                log_append,
                run[:, _kernel.MAX_TS].copy(),
                np.int64(self.lo),
                np.int64(self.hi),
                *self.out.kernel_args(),
            )
        del keep  # the decompressed payloads are no longer needed
        if err != _kernel.E_OK:
            self._raise(int(err), run, int(bi), int(epos))
        if self.out.rows >= self.max_rows:
            yield self.out.to_batch(self.topic, self.partition)
            self.out = None

    def _raise(self, err: int, run: Arr, i: int, pos: int) -> None:
        """Turn a kernel error (``pos`` relative to batch ``i``'s payload) into a typed error."""
        reason = _kernel.ERRORS[err]
        batch_pos = int(run[i, _kernel.POS])
        if run[i, _kernel.ATTR] & 0x07:
            raise CorruptRecordError(
                f"{reason} (decompressed byte {pos})", path=self.path, position=batch_pos
            )
        raise CorruptRecordError(reason, path=self.path, position=batch_pos + RECORD_BATCH_OVERHEAD + pos)


#: Outputs without room: the compiled loop asks for real ones (sized by the batch it stopped at).
_NO_OUTPUT = Outputs(0, 0)


def _kernels(pure: bool | None) -> ModuleType:
    if pure or (pure is None and _kernel.PURE):
        return _kernel if _kernel.PURE else _kernel.load_pure()
    return _kernel


def iter_arrow_batches(
    source: Source,
    *,
    topic: str,
    partition: int,
    max_batch_rows: int = 65536,
    start_offset: int | None = None,
    end_offset: int | None = None,
    verify_crc: bool = True,
    path: _PathArg = None,
    pure_python: bool | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream the data records of ``source`` as Arrow RecordBatches of :data:`KAFKA_SCHEMA`.

    Memory stays bounded by one output batch: at most ``max_batch_rows`` rows (a single Kafka
    batch with more records is emitted whole), plus about 1 MiB of compressed batches being
    decoded into it. Offsets are kept
    in ``[start_offset, end_offset)``. ``pure_python`` forces (True) or forbids (False) the
    un-jitted kernels; by default they are used only when ``RLM_DISABLE_JIT=1``. Raises
    :class:`~rlm.errors.LogFormatError` subclasses naming the path and byte position.
    """
    kern = _kernels(pure_python)
    name = source_name(source, path)
    with open_window(source, path=path) as window:
        decoder = _Decoder(
            window.view,
            kern=kern,
            path=name,
            topic=topic,
            partition=partition,
            start_offset=start_offset,
            end_offset=end_offset,
            verify_crc=verify_crc,
        )
        try:
            yield from decoder.decode(max(1, max_batch_rows), window)
        finally:
            decoder.close()
            del decoder  # drop numpy views of the mapped file before it is unmapped


def read_arrow(
    source: Source,
    *,
    topic: str,
    partition: int,
    start_offset: int | None = None,
    end_offset: int | None = None,
    verify_crc: bool = True,
    path: _PathArg = None,
    pure_python: bool | None = None,
) -> pa.Table:
    """All data records of ``source`` (path, bytes or binary file) as one table of :data:`KAFKA_SCHEMA`."""
    batches = list(
        iter_arrow_batches(
            source,
            topic=topic,
            partition=partition,
            max_batch_rows=_READ_ROWS,
            start_offset=start_offset,
            end_offset=end_offset,
            verify_crc=verify_crc,
            path=path,
            pure_python=pure_python,
        )
    )
    return pa.Table.from_batches(batches, schema=KAFKA_SCHEMA)
