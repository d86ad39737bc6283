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

Decompression is capped (:data:`MAX_DECOMPRESSED_BYTES` per batch unless a caller passes
``max_size``): a few KiB of crafted zstd or gzip can inflate to gigabytes, and a reader of
untrusted segments must fail with :class:`~rlm.errors.DecompressedSizeError` instead of
exhausting memory. Every codec checks the cap *before* producing the bytes that would exceed it.
"""

from __future__ import annotations

import struct
import threading
import zlib

import cramjam
import xxhash
import zstandard

from rlm.errors import CompressionError, DecompressedSizeError
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

#: Default cap on one batch's decompressed bytes. Kafka's own limits (message.max.bytes, 1 MiB by
#: default; fetch.max.bytes) are far below it, so only corrupt or hostile input reaches it.
#: Assign a new value to change the process-wide default; ``decompress(max_size=...)`` overrides it.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

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
    max_size: int | None = None,
) -> bytes:
    """Decompress one batch payload; any failure raises :class:`CompressionError`.

    Output above ``max_size`` (default :data:`MAX_DECOMPRESSED_BYTES`) raises
    :class:`DecompressedSizeError` without having allocated it.
    """
    limit = MAX_DECOMPRESSED_BYTES if max_size is None else max_size
    try:
        if codec == Compression.GZIP:
            return _gzip_decompress(data, limit)
        if codec == Compression.SNAPPY:
            return _xerial_decompress(memoryview(data), limit)
        if codec == Compression.LZ4:
            return _lz4_decompress(memoryview(data), magic=magic, limit=limit)
        if codec == Compression.ZSTD and magic >= 2:
            return _zstd_decompress(data, limit)
        if codec == Compression.NONE:
            return bytes(data)
    except CompressionError as e:
        cls = DecompressedSizeError if isinstance(e, DecompressedSizeError) else CompressionError
        raise cls(f"{Compression(codec).name.lower()}: {e.reason}", path=path, position=position) from None
    except (
        cramjam.DecompressionError,
        zstandard.ZstdError,
        zlib.error,
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


def _too_big(limit: int) -> DecompressedSizeError:
    return DecompressedSizeError(f"decompressed size exceeds the cap of {limit} bytes")


# ---- gzip ----------------------------------------------------------------------------------------
def _gzip_decompress(data: bytes | memoryview, limit: int) -> bytes:
    """All gzip members of ``data`` (Java's GZIPInputStream reads concatenated members), capped."""
    out: list[bytes] = []
    total = 0
    rest: bytes | memoryview = data
    while True:
        obj = zlib.decompressobj(31)
        chunk = obj.decompress(rest, limit - total + 1)
        total += len(chunk)
        if total > limit or obj.unconsumed_tail:
            raise _too_big(limit)
        out.append(chunk)
        if not obj.eof:
            raise CompressionError("truncated gzip member")
        rest = obj.unused_data
        if not rest:
            return out[0] if len(out) == 1 else b"".join(out)


# ---- zstd ----------------------------------------------------------------------------------------
_ZSTD = threading.local()


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024  # a block never regenerates more (RFC 8878 Block_Maximum_Size)
_ZSTD_FEED = 1024  # input per step when the bound is too loose: <= 1 KiB * 32768 = 32 MiB over


def zstd_output_bound(data: bytes | memoryview) -> int | None:
    """Upper bound of what the zstd frames of ``data`` decompress to, from block headers alone.

    Walks frame and block headers (a few per 128 KiB of output, so cheap) without decoding;
    raw and RLE blocks give their exact size, compressed blocks at most 128 KiB. ``None`` when the
    headers do not parse (the decoder then reports the corruption, or the bounded path is taken).
    """
    view = memoryview(data)
    end, pos, bound = len(view), 0, 0
    while pos < end:
        if pos + 6 > end:
            return None
        (magic,) = struct.unpack_from("<I", view, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            (size,) = struct.unpack_from("<I", view, pos + 4)
            pos += 8 + size
            continue
        if magic != _ZSTD_MAGIC:
            return None
        fhd = view[pos + 4]
        single, fcs_flag = (fhd >> 5) & 1, fhd >> 6
        pos += 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
        pos += (1 if single else 0, 2, 4, 8)[fcs_flag]
        while True:
            if pos + 3 > end:
                return None
            header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            kind, size = (header >> 1) & 3, header >> 3
            pos += 3
            if kind == 0:  # raw
                bound, pos = bound + size, pos + size
            elif kind == 1:  # RLE: one byte repeated ``size`` times
                bound, pos = bound + size, pos + 1
            elif kind == 2:
                bound, pos = bound + _ZSTD_BLOCK_MAX, pos + size
            else:
                return None
            if header & 1:
                break
        pos += 4 if fhd & 0x04 else 0
    return bound if pos == end else None


def _zstd_decompress(data: bytes | memoryview, limit: int) -> bytes:
    """All frames of ``data`` (Kafka's have no content size), reusing a per-thread decoder context.

    When the block headers prove the output fits the cap, each frame is decoded in one call;
    otherwise input is fed 1 KiB at a time and decoding stops as soon as the cap is passed.
    """
    decompressor = getattr(_ZSTD, "d", None)
    if decompressor is None:
        decompressor = _ZSTD.d = zstandard.ZstdDecompressor()
    bound = zstd_output_bound(data)
    feed = len(data) + 1 if bound is not None and bound <= limit else _ZSTD_FEED
    out = []
    total = 0
    view = memoryview(data)
    start = 0
    obj = decompressor.decompressobj()
    while True:
        chunk = obj.decompress(view[start : start + feed])
        start += feed
        total += len(chunk)
        if total > limit:
            raise _too_big(limit)
        out.append(chunk)
        if obj.eof:
            view, start = memoryview(obj.unused_data + bytes(view[start:])), 0
            if not view:
                return out[0] if len(out) == 1 else b"".join(out)
            obj = decompressor.decompressobj()
        elif start >= len(view):
            raise CompressionError("truncated zstd frame")


class ZstdFastPath:
    """One-call zstd decoding for the common case (a single complete frame), for hot loops.

    Returns ``None`` for anything else (several frames, truncation, corruption, output that may
    exceed the cap) so the caller can fall back to :func:`decompress`, which handles those and
    raises the typed errors. Not thread-safe: use one instance per thread.
    """

    def __init__(self, max_size: int | None = None) -> None:
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._limit = MAX_DECOMPRESSED_BYTES if max_size is None else max_size

    def __call__(self, data: bytes | memoryview) -> bytes | None:
        bound = zstd_output_bound(data)
        if bound is None or bound > self._limit:
            return None
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


def _snappy_declared(block: memoryview, room: int, limit: int) -> int:
    """The length one raw snappy block declares, checked against ``room`` before anything is decoded."""
    declared = int(cramjam.snappy.decompress_raw_len(block))
    if declared > _SNAPPY_MAX_RATIO * len(block) + 64:
        raise CompressionError(f"raw block claims {declared} bytes from {len(block)}")
    if declared > room:
        raise _too_big(limit)
    return declared


def _snappy_into(block: memoryview, out: memoryview, declared: int) -> None:
    """Decode one raw block into ``out`` (exactly ``declared`` bytes long)."""
    if int(cramjam.snappy.decompress_raw_into(block, out)) != declared:
        raise CompressionError(f"raw block decodes to fewer bytes than the {declared} it declares")


def _xerial_decompress(view: memoryview, limit: int) -> bytes:
    """Every block's declared length is read and checked first (cheap: a varint), then each block
    is decoded straight into its place in one per-thread scratch buffer, copied out once: no
    intermediate ``bytes`` per block and no join."""
    if len(view) < 16 or view[:8] != _XERIAL_MAGIC:
        declared = _snappy_declared(view, limit, limit)
        out = _scratch(declared)
        _snappy_into(view, out[:declared], declared)
        return bytes(out[:declared])
    total = 0
    blocks: list[tuple[memoryview, int]] = []
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
        block = view[pos : pos + length]
        declared = _snappy_declared(block, limit - total, limit)
        blocks.append((block, declared))
        total += declared
        pos += length
    out = _scratch(total)
    at = 0
    for block, declared in blocks:
        _snappy_into(block, out[at : at + declared], declared)
        at += declared
    return bytes(out[:total])


_SCRATCH = threading.local()


def _scratch(n: int) -> memoryview:
    """A per-thread buffer of at least ``n`` bytes, reused by every call (callers copy out of it
    before returning, so no caller ever sees it). Grows to the largest batch the thread decoded."""
    buf: bytearray | None = getattr(_SCRATCH, "buf", None)
    if buf is None or len(buf) < n:
        buf = _SCRATCH.buf = bytearray(max(n, 2 * len(buf) if buf is not None else 0, 1 << 16))
    return memoryview(buf)


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


def _lz4_decompress(view: memoryview, *, magic: int, limit: int) -> bytes:
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
    # blocks are decoded straight into one per-thread scratch buffer, copied out once at the end
    total = 0
    out = _scratch(max_block)
    while True:
        if pos + 4 > end:
            raise CompressionError(f"truncated lz4 frame at {pos}")
        (word,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if word == 0:
            return bytes(out[:total])
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
        if len(out) < total + max_block:
            grown = _scratch(total + max_block)  # keeps what was decoded so far
            grown[:total] = out[:total]
            out = grown
        if word & _LZ4_UNCOMPRESSED:
            out[total : total + size] = block
            n = size
        else:
            n = cramjam.lz4.decompress_block_into(block, out[total : total + max_block], output_len=max_block)
        total += n  # each block adds at most max_block (<= 4 MiB) before this check
        if total > limit:
            raise _too_big(limit)
