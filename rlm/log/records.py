"""Record batches of ``.log`` files: walk entries, check CRCs, decode records and control markers.

Walking follows Java's ``FileLogInputStream.nextBatch`` so that we stop exactly where a broker
stops: silently when 17 bytes or fewer remain or when the last entry runs past the end (a
partially written tail), with :class:`~rlm.errors.CorruptRecordError` when an entry's size is
below 14 (the zero tail of a preallocated file). Decoding is the per-record slow path; bulk
decoding to Arrow lives in :mod:`rlm.log.arrow`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

from rlm.errors import CorruptRecordError, CrcMismatchError
from rlm.log import codecs
from rlm.log._crc import crc32c
from rlm.log._v2 import parse_records
from rlm.log.legacy import legacy_header, legacy_records
from rlm.log.model import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MIN_ENTRY_SIZE,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    Compression,
    ControlRecord,
    ControlRecordType,
    Record,
    TimestampType,
)
from rlm.log.source import FileWindow, Source, open_window, source_name

__all__ = [
    "BatchHeader",
    "Compression",
    "ControlRecord",
    "ControlRecordType",
    "Record",
    "TimestampType",
    "decode_control_records",
    "decode_records",
    "iter_batches",
    "iter_records",
    "parse_v2_header",
    "read_batch_bytes",
]

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_PathArg = str | os.PathLike[str] | None


def parse_v2_header(buf: memoryview, position: int, *, path: str | None, verify_crc: bool) -> BatchHeader:
    """Parse and validate the 61-byte header of the v2 batch at ``position`` (whole batch in ``buf``)."""
    _, size, _, magic = struct.unpack_from(">qiib", buf, position)
    if magic != 2:
        raise CorruptRecordError(f"unsupported record batch magic {magic}", path=path, position=position)
    if size + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"record batch size {size + LOG_OVERHEAD} is smaller than the minimum 61",
            path=path,
            position=position,
        )
    if position + LOG_OVERHEAD + size > len(buf):
        raise CorruptRecordError(
            f"record batch of {size + LOG_OVERHEAD} bytes runs past the end", path=path, position=position
        )
    fields = _V2_HEADER.unpack_from(buf, position)
    batch_length, crc, attributes, count = fields[1], fields[4], fields[5], fields[12]
    if verify_crc:
        end = position + LOG_OVERHEAD + batch_length
        actual = crc32c(buf[position + 21 : end])
        if actual != crc:
            raise CrcMismatchError(
                f"record batch crc {crc:#010x} does not match content ({actual:#010x})",
                path=path,
                position=position,
            )
    if count < 0:
        raise CorruptRecordError(f"invalid record count {count}", path=path, position=position)
    if attributes & 0x07 > Compression.ZSTD:
        raise CorruptRecordError(
            f"unknown compression codec {attributes & 0x07}", path=path, position=position
        )
    return BatchHeader(position, *fields)


def _walk(
    buf: memoryview,
    *,
    path: str | None,
    start: int,
    end: int | None,
    verify_crc: bool,
    window: FileWindow | None = None,
) -> Iterator[BatchHeader]:
    """Entry headers from ``start``; with a file ``window``, bytes are read (and released) as it goes."""
    limit = len(buf) if end is None else min(end, len(buf))
    pos = start
    if window is not None:
        window.start_at(start)
    while pos + HEADER_SIZE_UP_TO_MAGIC < limit:
        if window is not None:
            window.release(pos)
            window.ensure(pos + HEADER_SIZE_UP_TO_MAGIC + 1)
            window.ensure(pos + LOG_OVERHEAD + struct.unpack_from(">i", buf, pos + 8)[0])
        offset, size = struct.unpack_from(">qi", buf, pos)
        if size < MIN_ENTRY_SIZE:
            raise CorruptRecordError(
                f"entry size {size} is smaller than the minimum 14 (offset {offset})", path=path, position=pos
            )
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > limit:
            return
        magic = buf[pos + 16]
        if magic < 2:
            yield legacy_header(buf[pos:entry_end], path=path, position=pos, verify_crc=verify_crc)
        else:
            yield parse_v2_header(buf, pos, path=path, verify_crc=verify_crc)
        pos = entry_end


def iter_batches(
    source: Source,
    *,
    path: _PathArg = None,
    start_position: int = 0,
    end_position: int | None = None,
    verify_crc: bool = True,
) -> Iterator[BatchHeader]:
    """Yield the header of every complete entry from ``start_position`` up to ``end_position``.

    Cheap: only headers are parsed (plus the CRC when ``verify_crc``); records are not decoded,
    except that a legacy compressed wrapper is decompressed to learn its first offset. Files are
    memory-mapped, so a big segment is never read into memory as a whole.
    """
    name = source_name(source, path)
    with open_window(source, path=path) as w:
        yield from _walk(
            w.view, path=name, start=start_position, end=end_position, verify_crc=verify_crc, window=w
        )


def read_batch_bytes(source: Source, header: BatchHeader, *, path: _PathArg = None) -> bytes:
    """The whole entry ``header`` describes (log overhead included), copied out of ``source``."""
    with open_window(source, path=path) as w:
        w.start_at(header.position)
        w.ensure(header.end_position)
        buf = w.view
        if header.end_position > len(buf):
            raise CorruptRecordError(
                f"entry of {header.size} bytes runs past the end ({len(buf)})",
                path=source_name(source, path),
                position=header.position,
            )
        return bytes(buf[header.position : header.end_position])


def _entry_view(batch: bytes | bytearray | memoryview, path: str | None, position: int) -> memoryview:
    view = memoryview(batch).cast("B") if isinstance(batch, memoryview) else memoryview(batch)
    if len(view) < HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError(f"entry of {len(view)} bytes is too short", path=path, position=position)
    _, size = struct.unpack_from(">qi", view, 0)
    if size < MIN_ENTRY_SIZE or LOG_OVERHEAD + size > len(view):
        raise CorruptRecordError(
            f"entry size {size} does not fit the {len(view)} bytes given", path=path, position=position
        )
    return view[: LOG_OVERHEAD + size]


def batch_payload(view: memoryview, header: BatchHeader, *, path: str | None) -> memoryview:
    """The uncompressed records region of a v2 batch (``view`` = the whole entry)."""
    payload = view[RECORD_BATCH_OVERHEAD : header.size]
    if header.compression == Compression.NONE:
        return payload
    return memoryview(codecs.decompress(header.compression, payload, path=path, position=header.position))


def _decode_v2(view: memoryview, header: BatchHeader, path: str | None) -> list[Record]:
    payload = batch_payload(view, header, path=path)
    compressed = header.compression != Compression.NONE
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    return parse_records(
        payload,
        header,
        path=path,
        payload_position=None if compressed else header.position + RECORD_BATCH_OVERHEAD,
        log_append_time=header.max_timestamp if log_append else None,
    )


def decode_records(
    batch: bytes | bytearray | memoryview,
    *,
    path: _PathArg = None,
    position: int = 0,
    verify_crc: bool = True,
) -> list[Record]:
    """Records of one entry (any magic, decompressed). A control batch gives ``[]``.

    ``position`` is the entry's byte position in its file, used only in error messages.
    """
    name = source_name(batch, path)
    view = _entry_view(batch, name, position)
    if view[16] < 2:
        return legacy_records(view, path=name, position=position, verify_crc=verify_crc)
    header = parse_v2_header(view, 0, path=name, verify_crc=verify_crc)
    header = _at(header, position)
    if header.is_control:
        return []
    return _decode_v2(view, header, name)


def decode_control_records(
    batch: bytes | bytearray | memoryview,
    *,
    path: _PathArg = None,
    position: int = 0,
    verify_crc: bool = True,
) -> list[ControlRecord]:
    """Control records of one control batch (``[]`` for a data batch or an empty control batch)."""
    name = source_name(batch, path)
    view = _entry_view(batch, name, position)
    if view[16] < 2:
        return []
    header = _at(parse_v2_header(view, 0, path=name, verify_crc=verify_crc), position)
    if not header.is_control:
        return []
    return [_control(r, header, name) for r in _decode_v2(view, header, name)]


def _at(header: BatchHeader, position: int) -> BatchHeader:
    if position == header.position:
        return header
    return BatchHeader(
        position, *(getattr(header, f) for f in BatchHeader.__dataclass_fields__ if f != "position")
    )


def _control(record: Record, header: BatchHeader, path: str | None) -> ControlRecord:
    key, value = record.key, record.value
    if key is None or len(key) < 4:
        raise CorruptRecordError(
            f"control record key must have at least 4 bytes (offset {record.offset})",
            path=path,
            position=header.position,
        )
    version, ctype = struct.unpack_from(">hh", key, 0)
    if version < 0:
        raise CorruptRecordError(
            f"invalid control record key version {version}", path=path, position=header.position
        )
    kind = ControlRecordType.parse(ctype)
    epoch: int | None = None
    if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        if value is None or len(value) < 6:
            raise CorruptRecordError(
                f"end transaction marker value must have 6 bytes (offset {record.offset})",
                path=path,
                position=header.position,
            )
        value_version, epoch = struct.unpack_from(">hi", value, 0)
        if value_version < 0:
            raise CorruptRecordError(
                f"invalid end transaction marker version {value_version}", path=path, position=header.position
            )
    return ControlRecord(record.offset, record.timestamp, kind, version, epoch)


def iter_records(
    source: Source, *, path: _PathArg = None, start_position: int = 0, verify_crc: bool = True
) -> Iterator[tuple[BatchHeader, Record | ControlRecord]]:
    """Every record of the source with its batch header; control batches yield :class:`ControlRecord`.

    The convenient slow path (one Python object per record); use :func:`rlm.log.read_arrow` for bulk.
    """
    name = source_name(source, path)
    with open_window(source, path=path) as w:
        buf = w.view
        for header in _walk(buf, path=name, start=start_position, end=None, verify_crc=verify_crc, window=w):
            view = buf[header.position : header.end_position]
            if header.magic < 2:
                for r in legacy_records(view, path=name, position=header.position, verify_crc=False):
                    yield header, r
            elif header.is_control:
                for r in _decode_v2(view, header, name):
                    yield header, _control(r, header, name)
            else:
                for r in _decode_v2(view, header, name):
                    yield header, r
