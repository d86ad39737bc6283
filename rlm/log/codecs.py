"""Compression codecs framed exactly as Kafka's Java clients and broker frame them.

The compressed bytes need not match Java's bit for bit, but the framing must, or a broker
(and every other client) rejects the batch:

* gzip: one RFC 1952 member (cramjam writes the same minimal header as JDK >= 16).
* snappy: xerial ``SnappyOutputStream`` framing (16-byte header, big-endian block lengths,
  blocks of at most 32 KiB input). Reading also accepts raw snappy (librdkafka) and
  concatenated xerial streams, as ``SnappyInputStream`` does.
* lz4: Kafka's own LZ4 frame (FLG 0x60, BD 0x40, independent 64 KiB blocks). For magic 0 Kafka
  computes the header checksum over the magic bytes too; we reproduce that when writing and skip
  the check when reading, as Java does (KIP-57).
* zstd: a streaming frame without a content-size field; reading accepts several frames.

Every decoding failure becomes :class:`~rlm.errors.CompressionError` naming path and position.
"""

from __future__ import annotations

import struct
import threading

import cramjam
import xxhash
import zstandard

from rlm.errors import CompressionError
from rlm.log.model import Compression

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
#: Snappy cannot expand by more than ~21x (a 3-byte copy of 64 bytes); bigger claims are corrupt.
_SNAPPY_MAX_RATIO = 32

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG = 0x60  # version 01, independent blocks, no checksums, no content size
_LZ4_BD = 0x40  # 64 KiB maximum block
_LZ4_BLOCK = 64 * 1024
_LZ4_BLOCK_SIZES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_LZ4_UNCOMPRESSED = 0x80000000

_ZSTD_LEVEL = 3
_GZIP_LEVEL = 6


def compress(codec: Compression, data: bytes | memoryview, *, magic: int = 2) -> bytes:
    """Compress ``data`` with Kafka's framing for ``codec`` (``magic`` matters only for lz4)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=_GZIP_LEVEL))
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        return _lz4_compress(data, magic=magic)
    if codec == Compression.ZSTD:
        if magic < 2:
            raise ValueError("zstd needs magic 2")
        comp = cramjam.zstd.Compressor(level=_ZSTD_LEVEL)
        comp.compress(data)
        return bytes(comp.finish())
    raise ValueError(f"unknown compression {codec!r}")


def decompress(
    codec: int,
    data: bytes | memoryview,
    *,
    magic: int = 2,
    path: str | None = None,
    position: int | None = None,
) -> bytes:
    """Decompress one batch payload; any failure raises :class:`CompressionError`."""
    try:
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            return _xerial_decompress(memoryview(data))
        if codec == Compression.LZ4:
            return _lz4_decompress(memoryview(data), magic=magic)
        if codec == Compression.ZSTD and magic >= 2:
            return _zstd_decompress(data)
        if codec == Compression.NONE:
            return bytes(data)
    except CompressionError as e:
        raise CompressionError(
            f"{Compression(codec).name.lower()}: {e.reason}", path=path, position=position
        ) from None
    except (
        cramjam.DecompressionError,
        zstandard.ZstdError,
        ValueError,
        OverflowError,
        MemoryError,
        struct.error,
    ) as e:
        name = Compression(codec).name.lower()
        raise CompressionError(f"{name}: cannot decompress: {e}", path=path, position=position) from None
    raise CompressionError(
        f"unsupported compression codec {codec} for magic {magic}", path=path, position=position
    )


# ---- zstd ----------------------------------------------------------------------------------------
_ZSTD = threading.local()


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    """All frames of ``data`` (Kafka's have no content size), reusing a per-thread decoder context."""
    decompressor = getattr(_ZSTD, "d", None)
    if decompressor is None:
        decompressor = _ZSTD.d = zstandard.ZstdDecompressor()
    out = []
    rest: bytes | memoryview = data
    while True:
        obj = decompressor.decompressobj()
        out.append(obj.decompress(rest))
        if not obj.eof:
            raise CompressionError("truncated zstd frame")
        rest = obj.unused_data
        if not rest:
            return out[0] if len(out) == 1 else b"".join(out)


class ZstdFastPath:
    """One-call zstd decoding for the common case (a single complete frame), for hot loops.

    Returns ``None`` for anything else (several frames, truncation, corruption) so the caller can
    fall back to :func:`decompress`, which handles those and raises the typed errors. Not
    thread-safe: use one instance per thread.
    """

    def __init__(self) -> None:
        self._new = zstandard.ZstdDecompressor().decompressobj

    def __call__(self, data: bytes | memoryview) -> bytes | None:
        try:
            obj = self._new()
            out: bytes = obj.decompress(data)
        except zstandard.ZstdError:
            return None
        return out if obj.eof and not obj.unused_data else None


# ---- snappy (xerial framing) ---------------------------------------------------------------------
def _xerial_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    out = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_raw(block: memoryview) -> bytes:
    declared = cramjam.snappy.decompress_raw_len(block)
    if declared > _SNAPPY_MAX_RATIO * len(block) + 64:
        raise CompressionError(f"raw block claims {declared} bytes from {len(block)}")
    return bytes(cramjam.snappy.decompress_raw(block))


def _xerial_decompress(view: memoryview) -> bytes:
    if len(view) < 16 or view[:8] != _XERIAL_MAGIC:
        return _snappy_raw(view)
    out: list[bytes] = []
    pos = 16
    end = len(view)
    while pos < end:
        if view[pos : pos + 8] == _XERIAL_MAGIC:  # concatenated stream: a new header
            pos += 16
            continue
        if pos + 4 > end:
            raise CompressionError(f"truncated block length at {pos}")
        (length,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CompressionError(f"invalid block length {length} at {pos - 4}")
        out.append(_snappy_raw(view[pos : pos + length]))
        pos += length
    return b"".join(out)


# ---- lz4 (Kafka frame) ---------------------------------------------------------------------------
def lz4_header_checksum(descriptor: bytes) -> int:
    """Byte HC of an LZ4 frame descriptor: second byte of xxh32(seed 0)."""
    return (xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF


def _lz4_compress(data: bytes | memoryview, *, magic: int) -> bytes:
    view = memoryview(data)
    descriptor = bytes((_LZ4_FLG, _LZ4_BD))
    # Kafka's magic-0 writer hashed the 4 magic bytes as well (KIP-57 keeps that bug for v0).
    hc = lz4_header_checksum(_LZ4_MAGIC + descriptor if magic == 0 else descriptor)
    out = [_LZ4_MAGIC, descriptor, bytes((hc,))]
    for start in range(0, len(view), _LZ4_BLOCK):
        chunk = view[start : start + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            out.append(struct.pack("<I", len(chunk) | _LZ4_UNCOMPRESSED))
            out.append(bytes(chunk))
        else:
            out.append(struct.pack("<I", len(block)))
            out.append(block)
    out.append(b"\x00\x00\x00\x00")
    return b"".join(out)


def _lz4_decompress(view: memoryview, *, magic: int) -> bytes:
    end = len(view)
    if end < 7 or view[:4] != _LZ4_MAGIC:
        raise CompressionError("missing lz4 frame magic")
    flg, bd = view[4], view[5]
    if (flg >> 6) != 1:
        raise CompressionError(f"unsupported lz4 frame version {flg >> 6}")
    if flg & 0x03 or bd & 0x8F:
        raise CompressionError(f"reserved lz4 descriptor bits set (FLG {flg:#04x}, BD {bd:#04x})")
    if not flg & 0x20:
        raise CompressionError("dependent block stream is unsupported")
    block_checksum = bool(flg & 0x10)
    pos = 6
    if flg & 0x08:  # content size, skipped like Java does
        pos += 8
    if pos >= end:
        raise CompressionError("truncated lz4 frame descriptor")
    if magic != 0:
        expected = lz4_header_checksum(bytes(view[4:pos]))
        if view[pos] != expected:
            raise CompressionError(f"lz4 frame descriptor checksum {view[pos]:#04x} != {expected:#04x}")
    pos += 1
    max_block = _LZ4_BLOCK_SIZES.get((bd >> 4) & 0x07)
    if max_block is None:
        raise CompressionError(f"unsupported lz4 block size id {(bd >> 4) & 0x07}")
    out: list[bytes] = []
    scratch = bytearray(max_block)
    while True:
        if pos + 4 > end:
            raise CompressionError(f"truncated lz4 frame at {pos}")
        (word,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if word == 0:
            return b"".join(out)
        size = word & 0x7FFFFFFF
        if size > max_block or pos + size + (4 if block_checksum else 0) > end:
            raise CompressionError(f"invalid lz4 block size {size} at {pos - 4}")
        block = view[pos : pos + size]
        pos += size
        if block_checksum:
            (want,) = struct.unpack_from("<I", view, pos)
            pos += 4
            if xxhash.xxh32_intdigest(block) != want:
                raise CompressionError(f"lz4 block checksum mismatch at {pos - 4 - size - 4}")
        if word & _LZ4_UNCOMPRESSED:
            out.append(bytes(block))
        else:
            n = cramjam.lz4.decompress_block_into(block, scratch, output_len=max_block)
            out.append(bytes(scratch[:n]))
