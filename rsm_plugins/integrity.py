"""Per-file CRC-32C checksums and the compact custom metadata that carries them.

A copy returns custom metadata (KIP-917) that Kafka stores in the segment's metadata record and
hands back on every fetch. The broker rejects custom metadata above
``remote.log.metadata.custom.metadata.max.bytes`` (default 128) and then *stops copying the
partition for good*, so the encoding is a small versioned binary, never JSON, and always fits
the budget it is given:

====== =========================================================================
bytes  meaning
====== =========================================================================
1      magic ``0xA5`` (custom metadata from other plugins is recognised and ignored; an adopted
       segment's redirect, :mod:`rsm_plugins.redirect`, and a compacted segment's mark,
       :mod:`rsm_plugins.compaction_mark`, are unwrapped first)
1      format version (1)
1      layout code (1 = Kafka ``LocalTieredStorage`` layout, 2 = ``s3`` key layout)
1      bitmap of the files present, bit i = i-th :class:`SegmentFileType`
n x    per present file, in declaration order: CRC-32C (uint32 big-endian), size (uvarint)
rest   optional location: uvarint length + UTF-8 (``bucket/prefix`` for s3, the root
       URL or path otherwise); left out when it would not fit the budget
====== =========================================================================

Six files with a 1 GiB ``.log`` need 4 + 6*4 + 18 = 46 bytes, leaving ~80 for the location.
"""

from __future__ import annotations

import ctypes
import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import google_crc32c

from rlm.errors import RemoteStorageError, RemoteStorageIntegrityError
from rsm_plugins import compaction_mark
from rsm_plugins.layout import SegmentFileType

MAGIC = 0xA5
VERSION = 1
DEFAULT_MAX_BYTES = 128


class LayoutCode(enum.IntEnum):
    KAFKA = 1
    S3 = 2


def _load_extend() -> Any:
    """``crc32c_extend(crc, ptr, len)`` of the C library inside google_crc32c, via ctypes, so that
    writable buffers (what ``readinto`` fills) are checksummed without copying them to ``bytes``
    (``google_crc32c.extend`` accepts only ``bytes``). ``None`` if the library is not there."""
    try:
        from google_crc32c import _crc32c

        fn = ctypes.CDLL(_crc32c.__file__).crc32c_extend
    except (ImportError, OSError, AttributeError):
        return None
    fn.restype = ctypes.c_uint32
    fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
    return fn


_EXTEND: Any = _load_extend()


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``crc``."""
    if isinstance(data, bytes):
        return int(google_crc32c.extend(crc, data))
    view = memoryview(data).cast("B")
    if _EXTEND is not None and not view.readonly:
        if not view.nbytes:
            return crc
        return int(_EXTEND(crc, ctypes.addressof(ctypes.c_char.from_buffer(view)), view.nbytes))
    return int(google_crc32c.extend(crc, bytes(view)))


_POLY_REFLECTED = 0x82F63B78


def _gf2_times(matrix: tuple[int, ...], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= matrix[i]
        vec >>= 1
        i += 1
    return out


def _gf2_compose(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The operator "apply ``b``, then ``a``"."""
    return tuple(_gf2_times(a, col) for col in b)


@functools.lru_cache(maxsize=64)
def _zeros_operator(nbytes: int) -> tuple[int, ...]:
    """32x32 GF(2) matrix that advances a CRC-32C register over ``nbytes`` zero bytes (zlib's
    ``crc32_combine`` construction, kept as a matrix so equal chunk sizes reuse it)."""
    one_bit = (_POLY_REFLECTED, *(1 << n for n in range(31)))
    op = _gf2_compose(one_bit, one_bit)  # 2 bits
    op = _gf2_compose(op, op)  # 4 bits
    op = _gf2_compose(op, op)  # 1 byte
    result: tuple[int, ...] = tuple(1 << n for n in range(32))  # identity
    while nbytes:
        if nbytes & 1:
            result = _gf2_compose(op, result)
        nbytes >>= 1
        if nbytes:
            op = _gf2_compose(op, op)
    return result


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32C of ``A + B`` from ``crc(A)``, ``crc(B)`` and ``len(B)``: lets parallel downloads
    checksum their own chunks and the reader combine them in order (microseconds per chunk)."""
    if len2 <= 0:
        return crc1
    return _gf2_times(_zeros_operator(len2), crc1) ^ crc2


class Crc32c:
    """Running CRC-32C and byte count of a stream."""

    __slots__ = ("size", "value")

    def __init__(self) -> None:
        self.value = 0
        self.size = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        n = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        if n:
            self.value = crc32c(data, self.value)
            self.size += n

    def result(self) -> FileChecksum:
        return FileChecksum(self.value, self.size)


@dataclass(frozen=True, slots=True)
class FileChecksum:
    crc32c: int
    size: int


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """What a copy recorded: layout, per-file checksums and (when it fits) where the files are."""

    layout: LayoutCode
    files: Mapping[SegmentFileType, FileChecksum] = field(default_factory=dict)
    location: str | None = None

    def checksum(self, file_type: SegmentFileType) -> FileChecksum | None:
        return self.files.get(file_type)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError(f"varint too long at byte {pos}")


def encode(manifest: SegmentManifest, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """Encode ``manifest`` in at most ``max_bytes``; the location is dropped if it does not fit.

    Raises :class:`RemoteStorageError` if even the checksums do not fit (a budget below ~60).
    """
    bitmap = 0
    body = bytearray()
    for ft in SegmentFileType:
        cs = manifest.files.get(ft)
        if cs is None:
            continue
        bitmap |= ft.bit
        body += cs.crc32c.to_bytes(4, "big") + _uvarint(cs.size)
    out = bytes([MAGIC, VERSION, int(manifest.layout), bitmap]) + bytes(body)
    if len(out) > max_bytes:
        raise RemoteStorageError(
            f"segment checksums need {len(out)} bytes of custom metadata, above the budget of {max_bytes}"
        )
    if manifest.location:
        loc = manifest.location.encode()
        tail = _uvarint(len(loc)) + loc
        if len(out) + len(tail) <= max_bytes:
            out += tail
    return out


def decode(blob: bytes | None) -> SegmentManifest | None:
    """Decode custom metadata written by :func:`encode`.

    Returns ``None`` for no custom metadata or for custom metadata of another plugin (other
    magic byte); raises :class:`RemoteStorageIntegrityError` if it is ours but malformed. The
    manifest of an adopted segment is the one inside its redirect (:mod:`rsm_plugins.redirect`),
    of a compacted segment the one inside its mark (:mod:`rsm_plugins.compaction_mark`).
    """
    blob = compaction_mark.inner_custom_metadata(blob)  # under a redirect and/or a compaction mark
    if not blob or blob[0] != MAGIC:
        return None
    try:
        if len(blob) < 4:
            raise ValueError(f"{len(blob)} bytes, the header needs 4")
        if blob[1] != VERSION:
            raise ValueError(f"unsupported version {blob[1]}")
        layout = LayoutCode(blob[2])
        bitmap = blob[3]
        if bitmap >> len(SegmentFileType):
            raise ValueError(f"unknown file bits in bitmap {bitmap:#x}")
        pos = 4
        files: dict[SegmentFileType, FileChecksum] = {}
        for ft in SegmentFileType:
            if bitmap & ft.bit:
                if pos + 4 > len(blob):
                    raise ValueError(f"truncated checksum of {ft.suffix} at byte {pos}")
                crc = int.from_bytes(blob[pos : pos + 4], "big")
                size, pos = _read_uvarint(blob, pos + 4)
                files[ft] = FileChecksum(crc, size)
        location = None
        if pos < len(blob):
            n, pos = _read_uvarint(blob, pos)
            if pos + n != len(blob):
                raise ValueError(f"location length {n} does not match the {len(blob) - pos} bytes left")
            location = blob[pos:].decode()
    except (ValueError, UnicodeDecodeError) as e:
        raise RemoteStorageIntegrityError(f"custom metadata of the segment is malformed: {e}") from e
    return SegmentManifest(layout, files, location)
