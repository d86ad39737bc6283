"""Decompression bombs: a small compressed payload that inflates far beyond the cap must fail
with a typed error naming path and position, for every codec, without allocating the output."""

from __future__ import annotations

import resource
import struct

import cramjam
import pytest
import zstandard

from rlm.errors import CompressionError, DecompressedSizeError
from rlm.log import codecs
from rlm.log.model import Compression

CAP = 1024 * 1024  # a small cap keeps the test cheap; the code path is the same as for 256 MiB
HUGE = 64 * CAP  # what each bomb claims to inflate to


def _zstd_bomb() -> bytes:
    # A streaming frame (no content size, like Kafka's) of zeros: ~2 KiB for 64 MiB.
    comp = zstandard.ZstdCompressor(level=19, write_content_size=False)
    return comp.compress(b"\0" * HUGE)


def _gzip_bomb() -> bytes:
    return bytes(cramjam.gzip.compress(b"\0" * HUGE, level=9))


def _lz4_bomb() -> bytes:
    return codecs.compress(Compression.LZ4, b"\0" * HUGE)


def _snappy_xerial_bomb() -> bytes:
    return codecs.compress(Compression.SNAPPY, b"\0" * HUGE)


def _snappy_raw_bomb() -> bytes:
    return bytes(cramjam.snappy.compress_raw(b"\0" * (4 * CAP)))


BOMBS = {
    Compression.ZSTD: _zstd_bomb,
    Compression.GZIP: _gzip_bomb,
    Compression.LZ4: _lz4_bomb,
    "snappy-xerial": _snappy_xerial_bomb,
    "snappy-raw": _snappy_raw_bomb,
}


@pytest.mark.parametrize("name", list(BOMBS), ids=str)
def test_bomb_raises_typed_error_naming_path_and_position(name: object) -> None:
    payload = BOMBS[name]()  # type: ignore[index]
    codec = Compression.SNAPPY if isinstance(name, str) else name
    assert len(payload) < HUGE // 16  # really a bomb: small input
    with pytest.raises(DecompressedSizeError) as info:
        codecs.decompress(codec, payload, path="/seg/00000000000000000000.log", position=1234, max_size=CAP)
    err = info.value
    assert isinstance(err, CompressionError)
    assert err.path == "/seg/00000000000000000000.log" and err.position == 1234
    assert str(CAP) in str(err)


@pytest.mark.parametrize("codec", [Compression.ZSTD, Compression.GZIP, Compression.LZ4, Compression.SNAPPY])
def test_output_at_the_cap_still_decodes(codec: Compression) -> None:
    data = bytes(range(256)) * (CAP // 256)
    assert codecs.decompress(codec, codecs.compress(codec, data), max_size=CAP) == data
    with pytest.raises(DecompressedSizeError):
        codecs.decompress(codec, codecs.compress(codec, data + b"x"), max_size=CAP)


def test_zstd_fast_path_declines_a_bomb() -> None:
    assert codecs.ZstdFastPath(max_size=CAP)(_zstd_bomb()) is None
    small = codecs.compress(Compression.ZSTD, b"abc" * 1000)
    assert codecs.ZstdFastPath(max_size=CAP)(small) == b"abc" * 1000


def test_zstd_bound_is_an_upper_bound() -> None:
    data = b"".join(struct.pack(">q", i) for i in range(200_000))
    frame = codecs.compress(Compression.ZSTD, data)
    bound = codecs.zstd_output_bound(frame)
    assert bound is not None and len(data) <= bound < len(data) + 128 * 1024
    assert codecs.zstd_output_bound(frame + frame) == 2 * bound  # several frames
    assert codecs.zstd_output_bound(frame[:-3]) is None  # truncated


def test_default_cap_bounds_memory_of_a_large_zstd_bomb(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the module default lowered, a 1 GiB bomb fails while peak memory grows far less."""
    monkeypatch.setattr(codecs, "MAX_DECOMPRESSED_BYTES", 4 * CAP)
    comp = zstandard.ZstdCompressor(level=3, write_content_size=False)
    chunker = comp.compressobj()
    parts = [chunker.compress(b"\0" * (16 * CAP)) for _ in range(64)]  # 1 GiB of zeros, streamed
    bomb = b"".join(parts) + chunker.flush()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DecompressedSizeError):
        codecs.decompress(Compression.ZSTD, bomb)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 128 * 1024  # far below the 1 GiB the bomb inflates to
