"""Compression framing as Kafka writes and reads it, cross-checked with kafka-python and aiokafka codecs."""

from __future__ import annotations

import os
import struct

import aiokafka.codec as aio
import cramjam
import kafka.codec as kp
import pytest
import xxhash

from rlm.errors import CompressionError
from rlm.log import Compression
from rlm.log.codecs import compress, decompress, lz4_header_checksum

SMALL = b"hello kafka " * 10
BIG = os.urandom(70_000) + b"abc" * 50_000  # > 64 KiB, with an incompressible part


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("data", [b"", SMALL, BIG], ids=["empty", "small", "big"])
def test_round_trip(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_xerial_snappy_framing() -> None:
    out = compress(Compression.SNAPPY, BIG)
    assert out[:16] == bytes.fromhex("82534e41505059000000000100000001")
    pos, total = 16, 0
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        block = bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + n]))
        assert len(block) <= 32 * 1024
        total += len(block)
        pos += 4 + n
    assert total == len(BIG)
    assert aio.snappy_decode(out) == BIG


def test_snappy_reads_raw_and_concatenated_xerial() -> None:
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(SMALL))) == SMALL
    both = compress(Compression.SNAPPY, SMALL) + compress(Compression.SNAPPY, b"second")
    assert decompress(Compression.SNAPPY, both) == SMALL + b"second"
    assert decompress(Compression.SNAPPY, aio.snappy_encode(BIG)) == BIG


def test_lz4_kafka_frame() -> None:
    out = compress(Compression.LZ4, BIG)
    assert out[:7] == bytes.fromhex("04224d18604082")
    assert out[-4:] == b"\0\0\0\0"
    pos, sizes, stored = 7, [], []
    while True:
        (word,) = struct.unpack_from("<I", out, pos)
        if word == 0:
            break
        sizes.append(word & 0x7FFFFFFF)
        stored.append(bool(word & 0x80000000))
        pos += 4 + (word & 0x7FFFFFFF)
    assert stored[0] and not stored[-1]  # random block stored raw (bit 31), repetitive block compressed
    assert all(s <= 64 * 1024 for s in sizes)
    assert bytes(cramjam.lz4.decompress(out)) == BIG  # a standard LZ4 frame reader agrees


def test_lz4_magic_v0_header_checksum_quirk() -> None:
    v0 = compress(Compression.LZ4, SMALL, magic=0)
    assert v0[6] == lz4_header_checksum(bytes.fromhex("04224d186040")) != 0x82
    assert decompress(Compression.LZ4, v0, magic=0) == SMALL
    with pytest.raises(CompressionError, match="checksum"):
        decompress(Compression.LZ4, v0, magic=1)


def test_lz4_reads_block_checksums_and_content_size() -> None:
    framed = aio.lz4_encode(BIG)  # cramjam's frame: FLG 0x70 with block checksums
    assert framed[4] & 0x10
    assert decompress(Compression.LZ4, framed) == BIG
    block = bytes(cramjam.lz4.compress_block(SMALL, store_size=False))
    desc = bytes([0x68, 0x40]) + struct.pack("<Q", len(SMALL))  # content size present
    frame = (
        b"\x04\x22\x4d\x18"
        + desc
        + bytes([lz4_header_checksum(desc)])
        + struct.pack("<I", len(block))
        + block
        + b"\0\0\0\0"
    )
    assert decompress(Compression.LZ4, frame) == SMALL
    bad = bytearray(framed)
    bad[-6] ^= 0xFF  # inside the last block or its checksum
    with pytest.raises(CompressionError):
        decompress(Compression.LZ4, bytes(bad))


def test_lz4_rejects_linked_blocks() -> None:
    desc = bytes([0x40, 0x40])  # block independence bit clear
    frame = b"\x04\x22\x4d\x18" + desc + bytes([(xxhash.xxh32_intdigest(desc) >> 8) & 0xFF]) + b"\0\0\0\0"
    with pytest.raises(CompressionError, match="dependent"):
        decompress(Compression.LZ4, frame)


def test_zstd_frame_has_no_content_size_and_multiple_frames_read() -> None:
    out = compress(Compression.ZSTD, BIG)
    assert out[:4] == bytes.fromhex("28b52ffd")
    assert out[4] & 0xC0 == 0 and not out[4] & 0x20  # FCS flag 0 and not single-segment: no content size
    assert decompress(Compression.ZSTD, out + compress(Compression.ZSTD, SMALL)) == BIG + SMALL
    assert kp.zstd_decode(out) == BIG
    assert decompress(Compression.ZSTD, kp.zstd_encode(SMALL)) == SMALL


def test_gzip_interop() -> None:
    out = compress(Compression.GZIP, BIG)
    assert out[:4] == bytes.fromhex("1f8b0800")
    assert kp.gzip_decode(out) == BIG
    assert decompress(Compression.GZIP, kp.gzip_encode(SMALL)) == SMALL


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_corrupt_payloads_raise_compression_error(codec: Compression) -> None:
    good = compress(codec, BIG)
    for bad in (good[: len(good) // 2], good[:3], b"\x00" * 40, bytes(reversed(good))):
        with pytest.raises(CompressionError) as e:
            decompress(codec, bad, path="seg.log", position=123)
        assert (e.value.path, e.value.position) == ("seg.log", 123)


def test_snappy_absurd_declared_length_is_rejected_before_allocating() -> None:
    bomb = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10  # raw block claiming 4 GiB
    with pytest.raises(CompressionError, match="claims"):
        decompress(Compression.SNAPPY, bomb)


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.SNAPPY])
def test_results_never_share_the_reused_scratch(codec: Compression) -> None:
    """lz4 and snappy decompress into one per-thread scratch buffer: what a call returned must stay
    what it was after later calls in the same thread reuse (and grow) that buffer."""
    first = decompress(codec, compress(codec, BIG))
    second = decompress(codec, compress(codec, SMALL))
    third = decompress(codec, compress(codec, BIG * 3))  # grows the scratch past BIG's size
    assert (first, second, third) == (BIG, SMALL, BIG * 3)
    assert isinstance(first, bytes)
