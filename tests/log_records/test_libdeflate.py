"""gzip batches inflated by libdeflate from the compiled loop, against the per-batch Python path.

Every gzip payload a producer may write that the Python path reads (one member as Kafka's Java
producer, librdkafka, kafka-python or cramjam write it; optional header fields; stored blocks;
any level; several members, which the compiled loop leaves to the Python path) must give the same
table with libdeflate, without it and un-jitted; payloads either path rejects must raise the same
typed error naming path and batch position; the decompression cap holds on both.
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

from rlm.errors import CompressionError, CorruptRecordError, DecompressedSizeError
from rlm.log import Compression, _libdeflate, codecs, encode_batch, iter_arrow_batches, read_arrow
from tests.log_records._data import mixed_segment, patch_payload, recompress, sample_records
from tests.log_records._paths import (
    assert_decodes_to,
    assert_mixed_log_same_on_every_path,
    forbid_python_decompression,
    python_path,
)

GZIP = int(Compression.GZIP)
LIB = _libdeflate.find_library()


@pytest.fixture(params=["libdeflate", "none"])
def libdeflate(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Decode with libdeflate (if the system has it) or without (the Python path)."""
    if request.param == "libdeflate" and LIB is None:
        pytest.skip("no libdeflate.so.0 here")
    pool = _libdeflate.DecompressorPool(LIB) if request.param == "libdeflate" and LIB is not None else None
    monkeypatch.setattr(_libdeflate, "pool", lambda: pool)
    yield request.param


def _python_path(data: bytes, monkeypatch: pytest.MonkeyPatch, **kw: object) -> pa.Table:
    return python_path(data, monkeypatch, _libdeflate, "pool", lambda: None, **kw)


def member(data: bytes, *, level: int = 6, extra: bool = False, name: bool = False, comment: bool = False,
           header_crc: bool = False) -> bytes:
    """One RFC 1952 member built field by field (raw deflate from zlib), with the optional fields."""
    flags = (0x04 if extra else 0) | (0x08 if name else 0) | (0x10 if comment else 0)
    flags |= 0x02 if header_crc else 0
    header = bytes((0x1F, 0x8B, 8, flags)) + struct.pack("<I", 1_700_000_000) + bytes((0, 255))
    if extra:
        header += struct.pack("<H", 6) + b"AB\x02\x00xy"
    if name:
        header += b"segment.log\0"
    if comment:
        header += b"written by a test\0"
    if header_crc:
        header += struct.pack("<H", zlib.crc32(header) & 0xFFFF)
    deflate = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = deflate.compress(data) + deflate.flush()
    return header + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


FRAMINGS: dict[str, Callable[[bytes], bytes]] = {
    "ours": lambda d: codecs.compress(Compression.GZIP, d),
    "python-gzip": lambda d: gzip.compress(d, 6, mtime=0),
    "level-1": lambda d: member(d, level=1),
    "level-9": lambda d: member(d, level=9),
    "stored": lambda d: member(d, level=0),
    "header-fields": lambda d: member(d, extra=True, name=True, comment=True, header_crc=True),
    "two-members": lambda d: member(d[: len(d) // 2]) + member(d[len(d) // 2 :]),  # left to Python
}
COMPILED = set(FRAMINGS) - {"two-members"}


def _segment(framing: Callable[[bytes], bytes], *, batches: int = 12, value_size: int = 0) -> bytes:
    return mixed_segment(GZIP, framing, batches=batches, value_size=value_size)


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_every_framing_decodes_like_the_python_path(
    framing: str, libdeflate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _segment(FRAMINGS[framing], value_size=300 if framing == "stored" else 0)
    expected = _python_path(data, monkeypatch)
    assert expected.num_rows == sum(20 + b for b in range(12))
    if libdeflate != "none" and framing in COMPILED:
        forbid_python_decompression(monkeypatch, "libdeflate")
    assert_decodes_to(data, expected)


def test_library_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    if LIB is not None:
        assert _libdeflate.open_library("libdeflate.so.0") is not None
        pool = _libdeflate.DecompressorPool(LIB)
        first = pool.acquire()
        assert first and pool.acquire() != first  # one decompressor per concurrent decode
        pool.release(first)
        assert pool.acquire() == first  # kept for reuse
    monkeypatch.setenv("RLM_LIBDEFLATE", "off")
    assert _libdeflate.find_library() is None
    monkeypatch.setenv("RLM_LIBDEFLATE", "/nonexistent/libdeflate.so")
    assert _libdeflate.find_library() is None
    assert _libdeflate.open_library("libc.so.6") is None  # a library, but not libdeflate


def test_output_boundaries_and_scratch_growth(libdeflate: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of ~600 KiB (over the 256 KiB first scratch) and small output batches."""
    data = _segment(FRAMINGS["ours"], batches=7, value_size=30_000)
    expected = _python_path(data, monkeypatch)
    for max_rows in (1, 7, 50, 1 << 20):
        got = list(iter_arrow_batches(data, topic="t", partition=0, max_batch_rows=max_rows))
        assert all(b.num_rows <= max(max_rows, 26) for b in got)
        assert pa.Table.from_batches(got).equals(expected)


def _flip(old: bytes) -> bytes:
    return bytes([old[0] ^ 0x55]) + old[1:]


def _add(n: int) -> Callable[[bytes], bytes]:
    return lambda old: struct.pack("<I", (struct.unpack("<I", old)[0] + n) & 0xFFFFFFFF)


REJECTED = {  # (offset in the payload, patch): every path must raise the Python path's error
    "crc-32": (-8, _flip),
    "isize-smaller": (-4, _add(-1)),
    "isize-larger": (-4, _add(1000)),
    "isize-over-the-cap": (-4, lambda old: struct.pack("<I", 0xFFFFFFF0)),
    "method": (0, lambda old: old[:2] + b"\x07" + old[3:]),
    "magic": (0, _flip),
    "reserved-flags": (0, lambda old: old[:3] + b"\xe0"),
}


@pytest.mark.parametrize("rejected", sorted(REJECTED))
def test_rejected_payloads_raise_the_same_typed_error(
    rejected: str, libdeflate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    at, patch = REJECTED[rejected]
    data, pos = patch_payload(_segment(FRAMINGS["ours"], value_size=200), 4, at, patch)
    errors = []
    for pure in (False, True):
        with pytest.raises(CompressionError) as info:
            read_arrow(data, topic="t", partition=0, verify_crc=False, path="p.log", pure_python=pure)
        errors.append(info.value)
    with pytest.raises(CompressionError) as info:
        _python_path(data, monkeypatch, verify_crc=False, path="p.log")
    errors.append(info.value)
    assert {(type(e), e.path, e.position, str(e)) for e in errors} == {
        (type(errors[-1]), "p.log", pos, str(errors[-1]))
    }
    assert f"{pos}: gzip: " in str(errors[-1])


def test_trailing_bytes_after_the_member_raise_the_same_typed_error(
    libdeflate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _segment(lambda d: member(d) + b"not gzip", value_size=200)
    with pytest.raises(CompressionError) as want:
        _python_path(data, monkeypatch, path="p.log")
    for pure in (False, True):
        with pytest.raises(CompressionError) as got:
            read_arrow(data, topic="t", partition=0, path="p.log", pure_python=pure)
        assert (type(got.value), got.value.position, str(got.value)) == (
            type(want.value), want.value.position, str(want.value))


def test_corrupt_deflate_stream_raises_a_typed_error_at_its_batch(libdeflate: str) -> None:
    """Garbage inside the deflate stream: libdeflate and zlib refuse it (CRC-32 and ISIZE are
    checked) or it inflates to records that do not parse; a typed error naming the batch."""
    rnd = random.Random(11)
    clean = _segment(FRAMINGS["ours"], value_size=200)
    for trial in range(30):
        at = 10 + rnd.randrange(200)
        data, pos = patch_payload(clean, 4, at, lambda old: rnd.randbytes(4))
        if data == clean:
            continue
        for pure in (False, True):
            try:
                table = read_arrow(
                    data, topic="t", partition=0, verify_crc=False, path="p.log", pure_python=pure
                )
            except CorruptRecordError as e:
                assert (e.path, e.position) == ("p.log", pos), (trial, e)
            else:  # a stream that still inflates and parses is possible: it must be a valid table
                table.validate(full=True)
        with pytest.raises(CorruptRecordError):  # the CRC-32C catches every change
            read_arrow(data, topic="t", partition=0, path="p.log")


def test_decompression_cap(libdeflate: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bomb over the (lowered) cap raises DecompressedSizeError; output at the cap decodes."""
    cap = 1 << 20
    monkeypatch.setattr(codecs, "MAX_DECOMPRESSED_BYTES", cap)
    zeros = b"\0" * (cap // 4)  # 8 of them: 2 MiB of zeros, ~2 KiB of gzip
    records: list[tuple[bytes, bytes, list[tuple[str, bytes]], int]] = [(b"k", zeros, [], 0)] * 8
    bomb = recompress(encode_batch(records, base_offset=0), GZIP, FRAMINGS["ours"])
    assert len(bomb) < 16384
    before = encode_batch(sample_records(3), base_offset=0)
    with pytest.raises(DecompressedSizeError) as info:
        read_arrow(before + bomb, topic="t", partition=0, path="p.log")
    assert (info.value.path, info.value.position) == ("p.log", len(before))
    fits = recompress(encode_batch(records[:3], base_offset=0), GZIP, FRAMINGS["ours"])
    table = read_arrow(fits, topic="t", partition=0)
    assert [len(v) for v in table.column("value").to_pylist()] == [cap // 4] * 3


def test_mixed_log_is_the_same_on_every_path(libdeflate: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_mixed_log_same_on_every_path(lambda data: _python_path(data, monkeypatch))
