"""zstd batches decoded by libzstd from the compiled loop, against the per-batch Python path.

Every zstd framing a producer may write (our encoder's streaming frame without content size,
frames with content size and checksum as one-shot compressors write them, several frames,
skippable frames, raw and RLE blocks, a batch bigger than the scratch buffer) must give the
same table whichever libzstd is used (``zstandard``'s wheel, the OS ``libzstd.so.1``), without
one (the Python fallback) and un-jitted; corrupt frames and the decompression cap must raise the
same typed errors naming path and batch position.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest
import zstandard

from rlm.errors import CompressionError, CorruptRecordError, CrcMismatchError, DecompressedSizeError
from rlm.log import Compression, _zstd, arrow, codecs, encode_batch, iter_arrow_batches, read_arrow
from rlm.log.model import RECORD_BATCH_OVERHEAD
from tests.log_records._data import mixed_segment, recompress, sample_records
from tests.log_records._paths import (
    assert_decodes_to,
    assert_mixed_log_same_on_every_path,
    forbid_python_decompression,
    python_path,
)

ZSTD = int(Compression.ZSTD)


def _libraries() -> dict[str, _zstd.LibZstd | None]:
    libs: dict[str, _zstd.LibZstd | None] = {"none": None}
    wheel = _zstd._wheel_library()
    if wheel is not None and (lib := _zstd.open_library(wheel)) is not None:
        libs["wheel"] = lib
    if (lib := _zstd.open_library("libzstd.so.1")) is not None:
        libs["os"] = lib
    return libs


LIBS = _libraries()


@pytest.fixture(params=sorted(LIBS))
def libzstd(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Decode with one libzstd (or none); with one, the Python zstd path must not be taken."""
    lib = LIBS[request.param]
    pool = _zstd.DCtxPool(lib) if lib is not None else None
    monkeypatch.setattr(_zstd, "pool", lambda: pool)
    yield request.param


def _forbid_python_zstd(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse = forbid_python_decompression(monkeypatch, "libzstd")
    monkeypatch.setattr(arrow.codecs, "ZstdFastPath", lambda: refuse)


def _use(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    lib = LIBS[name]
    pool = _zstd.DCtxPool(lib) if lib is not None else None
    monkeypatch.setattr(_zstd, "pool", lambda: pool)


def rezstd(batch: bytes, compress: Callable[[bytes], bytes]) -> bytes:
    return recompress(batch, ZSTD, compress)


def _streaming(data: bytes) -> bytes:  # like Kafka's Java producer: zstd-jni's stream, no content size
    obj = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    return b"".join(obj.compress(data[i : i + 1000]) for i in range(0, len(data), 1000)) + obj.flush()


def _content_size(data: bytes) -> bytes:  # a one-shot compressor: content size and checksum
    return zstandard.ZstdCompressor(level=1, write_content_size=True, write_checksum=True).compress(data)


def _two_frames(data: bytes) -> bytes:
    half = len(data) // 2
    return codecs.compress(Compression.ZSTD, data[:half]) + _content_size(data[half:])


def _skippable(data: bytes) -> bytes:
    skip = struct.pack("<II", 0x184D2A50, 7) + b"skipped"
    return skip + codecs.compress(Compression.ZSTD, data) + skip


def _raw_blocks(data: bytes) -> bytes:  # level -5: incompressible parts stay raw blocks
    return zstandard.ZstdCompressor(level=-5).compress(data)


def _kafka_python(data: bytes) -> bytes:  # kafka-python's producer: one-shot, with content size
    from kafka.codec import zstd_encode

    frame: bytes = zstd_encode(data)
    assert frame[4] & 0xC0 or frame[4] & 0x20, "content size expected"
    return frame


FRAMINGS: dict[str, Callable[[bytes], bytes]] = {
    "ours": lambda d: codecs.compress(Compression.ZSTD, d),
    "kafka-python": _kafka_python,
    "streaming-no-content-size": _streaming,
    "content-size-and-checksum": _content_size,
    "two-frames": _two_frames,
    "skippable-frames": _skippable,
    "raw-blocks": _raw_blocks,
}


def _segment(framing: Callable[[bytes], bytes], *, batches: int = 12, value_size: int = 0) -> bytes:
    return mixed_segment(ZSTD, framing, batches=batches, value_size=value_size)


def _python_path(data: bytes, monkeypatch: pytest.MonkeyPatch, **kw: object) -> pa.Table:
    return python_path(data, monkeypatch, _zstd, "pool", lambda: None, **kw)


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_every_framing_decodes_like_the_python_path(
    framing: str, libzstd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _segment(FRAMINGS[framing], value_size=300 if framing == "raw-blocks" else 0)
    expected = _python_path(data, monkeypatch)
    assert expected.num_rows == sum(20 + b for b in range(12))
    if libzstd != "none":
        _forbid_python_zstd(monkeypatch)
    assert_decodes_to(data, expected)


def test_library_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "wheel" in LIBS, "zstandard's wheel ships libzstd with exported symbols"
    found = _zstd.find_library()
    assert found is not None and found.version >= _zstd.MIN_VERSION
    assert found.path == LIBS["wheel"].path  # type: ignore[union-attr]
    monkeypatch.setenv("RLM_LIBZSTD", "off")
    assert _zstd.find_library() is None
    monkeypatch.setenv("RLM_LIBZSTD", "/nonexistent/libzstd.so")
    assert _zstd.find_library() is None
    assert _zstd.open_library("libc.so.6") is None  # a library, but not libzstd
    if "os" in LIBS:
        monkeypatch.setenv("RLM_LIBZSTD", "libzstd.so.1")
        assert _zstd.find_library() is not None


def test_contexts_are_not_shared_by_concurrent_decodes() -> None:
    lib = LIBS.get("wheel") or LIBS.get("os")
    if lib is None:
        pytest.skip("no libzstd")
    pool = _zstd.DCtxPool(lib)
    a, b = pool.acquire(), pool.acquire()
    assert a != b
    pool.release(a)
    assert pool.acquire() == a  # reused, not leaked


def test_output_boundaries_and_scratch_growth(libzstd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of ~600 KiB (over the 256 KiB first scratch) and small output batches."""
    data = _segment(FRAMINGS["ours"], batches=7, value_size=30_000)
    expected = _python_path(data, monkeypatch)
    for max_rows in (1, 7, 50, 1 << 20):
        got = list(iter_arrow_batches(data, topic="t", partition=0, max_batch_rows=max_rows))
        assert all(b.num_rows <= max(max_rows, 26) for b in got)
        assert pa.Table.from_batches(got).equals(expected)


def _corrupt(data: bytes, batch: int, at: int, patch: Callable[[bytes], bytes]) -> tuple[bytes, int]:
    """``data`` with bytes ``at..`` of batch ``batch``'s zstd payload patched; the batch position."""
    pos = 0
    for _ in range(batch):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    bad = bytearray(data)
    start = pos + RECORD_BATCH_OVERHEAD + at
    old = bytes(bad[start : start + 6])
    bad[start : start + 6] = patch(old)
    return bytes(bad), pos


CORRUPTIONS = {
    # the frame checksum no longer matches: only libzstd itself can tell
    "checksum": ("content-size-and-checksum", 12, lambda old: b"\xff\xfe\xfd\xfc\xfb\xfa", True),
    # the first block header (after a 6-byte frame header) says "reserved type"
    "block-type": ("ours", 6, lambda old: bytes([old[0] | 0x06]) + old[1:], True),
    # compressed bytes without a checksum: garbage out, the record decoder notices
    "content": ("ours", 12, lambda old: b"\xff\xfe\xfd\xfc\xfb\xfa", False),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupt_frame_raises_the_same_typed_error(
    corruption: str, libzstd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    framing, at, patch, is_compression_error = CORRUPTIONS[corruption]
    data, pos = _corrupt(_segment(FRAMINGS[framing], value_size=200), 4, at, patch)
    errors = []
    for pure in (False, True):
        with pytest.raises(CorruptRecordError) as info:
            read_arrow(data, topic="t", partition=0, verify_crc=False, path="p.log", pure_python=pure)
        errors.append(info.value)
    with pytest.raises(CorruptRecordError) as info:
        _python_path(data, monkeypatch, verify_crc=False, path="p.log")
    errors.append(info.value)
    assert {(type(e), e.path, e.position, str(e)) for e in errors} == {
        (type(errors[-1]), "p.log", pos, str(errors[-1]))
    }
    assert isinstance(errors[-1], CompressionError) == is_compression_error


def test_truncated_and_empty_frames(libzstd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = encode_batch(sample_records(30), base_offset=0)
    for framing in (lambda d: codecs.compress(Compression.ZSTD, d)[:-5], lambda d: b""):
        data = rezstd(plain, framing)
        with pytest.raises(CompressionError) as info:
            read_arrow(data, topic="t", partition=0, path="p.log")
        assert (info.value.path, info.value.position) == ("p.log", 0)


def test_decompression_cap(libzstd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bomb over the (lowered) cap raises DecompressedSizeError; output at the cap decodes."""
    cap = 1 << 20
    monkeypatch.setattr(codecs, "MAX_DECOMPRESSED_BYTES", cap)
    records = [(b"k", b"\0" * (cap // 4), [], 0) for _ in range(8)]  # 2 MiB of zeros: ~300 bytes zstd
    bomb = rezstd(encode_batch(records, base_offset=0), _streaming)
    assert len(bomb) < 4096
    before = encode_batch(sample_records(3), base_offset=0)
    with pytest.raises(DecompressedSizeError) as info:
        read_arrow(before + bomb, topic="t", partition=0, path="p.log")
    assert (info.value.path, info.value.position) == ("p.log", len(before))
    fits = rezstd(encode_batch(records[:3], base_offset=0), _streaming)
    table = read_arrow(fits, topic="t", partition=0)
    assert [len(v) for v in table.column("value").to_pylist()] == [cap // 4] * 3


def test_mixed_log_is_the_same_on_every_path(libzstd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_mixed_log_same_on_every_path(lambda data: _python_path(data, monkeypatch))


@pytest.mark.parametrize("batch", [0, 1, 4], ids=["uncompressed", "zstd", "zstd-later"])
def test_crc_mismatch_is_reported_at_its_batch(batch: int, libzstd: str) -> None:
    data = _segment(FRAMINGS["ours"], batches=6)
    pos = sum(12 + struct.unpack_from(">i", data, p + 8)[0] for p in _positions(data)[:batch])
    bad = bytearray(data)
    bad[pos + RECORD_BATCH_OVERHEAD + 3] ^= 0x40
    for pure in (False, True):
        with pytest.raises(CrcMismatchError) as info:
            read_arrow(bytes(bad), topic="t", partition=0, path="p.log", pure_python=pure)
        assert (info.value.path, info.value.position) == ("p.log", pos)
    # outside the offset range or not: every batch of the group is checked, as before
    with pytest.raises(CrcMismatchError):
        read_arrow(bytes(bad), topic="t", partition=0, start_offset=10**6)
    assert read_arrow(bytes(bad), topic="t", partition=0, start_offset=10**6, verify_crc=False).num_rows == 0


def _positions(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return out
