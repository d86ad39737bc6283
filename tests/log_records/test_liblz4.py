"""LZ4 batches decoded by liblz4 from the compiled loop, against the per-batch Python path.

Every LZ4 frame a producer may write that the Python path reads (Kafka's own: FLG 0x60, 64 KiB
independent blocks; with a content size; with a content checksum; stored blocks; 4 MiB blocks;
block checksums, which the compiled loop leaves to the Python path) must give the same table with
liblz4, without it and un-jitted; frames either path rejects must raise the same typed errors
naming path and batch position; the decompression cap holds on both.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator

import cramjam
import numpy as np
import pyarrow as pa
import pytest
import xxhash

from rlm.errors import CompressionError, CorruptRecordError, DecompressedSizeError
from rlm.log import Compression, _kernel, _lz4, codecs, encode_batch, iter_arrow_batches, read_arrow
from tests.log_records._data import mixed_segment, patch_payload, recompress, sample_records
from tests.log_records._paths import (
    assert_decodes_to,
    assert_mixed_log_same_on_every_path,
    forbid_python_decompression,
    python_path,
)

LZ4 = int(Compression.LZ4)
HAVE_LIBLZ4 = _lz4.find_library() != 0


@pytest.fixture(params=["liblz4", "none"])
def liblz4(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Decode with liblz4 (if the system has it) or without (the Python path)."""
    if request.param == "liblz4" and not HAVE_LIBLZ4:
        pytest.skip("no liblz4.so.1 here")
    monkeypatch.setattr(_lz4, "_ADDRESS", _lz4.find_library() if request.param == "liblz4" else 0)
    yield request.param


def _python_path(data: bytes, monkeypatch: pytest.MonkeyPatch, **kw: object) -> pa.Table:
    return python_path(data, monkeypatch, _lz4, "_ADDRESS", 0, **kw)


def frame(
    data: bytes,
    *,
    block_id: int = 4,
    content_size: bool = False,
    block_checksum: bool = False,
    content_checksum: bool = False,
    store: bool = False,
) -> bytes:
    """An LZ4 frame of independent blocks (the only kind Kafka reads), built field by field."""
    flg = 0x60 | (0x10 if block_checksum else 0) | (0x08 if content_size else 0)
    flg |= 0x04 if content_checksum else 0
    descriptor = bytes((flg, block_id << 4)) + (struct.pack("<Q", len(data)) if content_size else b"")
    out = [b"\x04\x22\x4d\x18", descriptor, bytes((codecs.lz4_header_checksum(descriptor),))]
    size = 1 << (8 + 2 * block_id)
    for start in range(0, len(data), size):
        chunk = data[start : start + size]
        packed = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if store or len(packed) >= len(chunk):
            block, word = chunk, len(chunk) | 0x80000000
        else:
            block, word = packed, len(packed)
        out += [struct.pack("<I", word), block]
        if block_checksum:
            out.append(struct.pack("<I", xxhash.xxh32_intdigest(block)))
    out.append(b"\0\0\0\0")
    if content_checksum:
        out.append(struct.pack("<I", xxhash.xxh32_intdigest(data)))
    return b"".join(out)


FRAMINGS: dict[str, Callable[[bytes], bytes]] = {
    "ours": lambda d: codecs.compress(Compression.LZ4, d),
    "content-size": lambda d: frame(d, content_size=True),
    "content-checksum": lambda d: frame(d, content_checksum=True),
    "stored-blocks": lambda d: frame(d, store=True),
    "4mib-blocks": lambda d: frame(d, block_id=7, content_size=True),
    "256kib-blocks": lambda d: frame(d, block_id=5),
    "block-checksums": lambda d: frame(d, block_checksum=True),  # left to the Python path
}
COMPILED = set(FRAMINGS) - {"block-checksums"}


def relz4(batch: bytes, compress: Callable[[bytes], bytes]) -> bytes:
    return recompress(batch, LZ4, compress)


def _segment(framing: Callable[[bytes], bytes], *, batches: int = 12, value_size: int = 0) -> bytes:
    return mixed_segment(LZ4, framing, batches=batches, value_size=value_size)


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_every_framing_decodes_like_the_python_path(
    framing: str, liblz4: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _segment(FRAMINGS[framing], value_size=300 if framing == "stored-blocks" else 0)
    expected = _python_path(data, monkeypatch)
    assert expected.num_rows == sum(20 + b for b in range(12))
    if liblz4 != "none" and framing in COMPILED:
        forbid_python_decompression(monkeypatch, "liblz4")
    assert_decodes_to(data, expected)


def test_library_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    if HAVE_LIBLZ4:
        assert _lz4.open_library("liblz4.so.1") != 0
    monkeypatch.setenv("RLM_LIBLZ4", "off")
    assert _lz4.find_library() == 0
    monkeypatch.setenv("RLM_LIBLZ4", "/nonexistent/liblz4.so")
    assert _lz4.find_library() == 0
    assert _lz4.open_library("libc.so.6") == 0  # a library, but not liblz4


@pytest.mark.parametrize("pure", [False, True], ids=["jit", "pure"])
def test_header_checksum_is_xxh32(pure: bool) -> None:
    """The compiled XXH32 of short inputs (frame descriptors) equals xxhash's, every length < 16."""
    kern = _kernel.load_pure() if pure else _kernel
    rnd = random.Random(3)
    for n in range(16):
        for _ in range(20):
            raw = rnd.randbytes(n + 5)
            buf = memoryview(raw) if pure else np.frombuffer(raw, np.uint8)
            got = int(kern._xxh32_short(buf, np.int64(3), np.int64(n)))
            assert got == xxhash.xxh32_intdigest(raw[3 : 3 + n])


def test_output_boundaries_and_scratch_growth(liblz4: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of ~600 KiB in 4 MiB blocks (over the 256 KiB first scratch) and small output batches."""
    data = _segment(lambda d: frame(d, block_id=7), batches=7, value_size=30_000)
    expected = _python_path(data, monkeypatch)
    for max_rows in (1, 7, 50, 1 << 20):
        got = list(iter_arrow_batches(data, topic="t", partition=0, max_batch_rows=max_rows))
        assert all(b.num_rows <= max(max_rows, 26) for b in got)
        assert pa.Table.from_batches(got).equals(expected)


REJECTED = {  # (offset in the frame, patch, message): both paths must raise the Python path's error
    "header-checksum": (6, lambda old: bytes([old[0] ^ 0x55]) + old[1:], "descriptor checksum"),
    "block-too-big": (7, lambda old: struct.pack("<I", 0x7FFFFF00), "invalid lz4 block size"),
    "reserved-bits": (4, lambda old: bytes([old[0] | 0x01]) + old[1:], "reserved lz4 descriptor bits"),
    "dependent-blocks": (4, lambda old: bytes([old[0] & ~0x20]) + old[1:], "dependent block stream"),
    "no-end-mark": (-4, lambda old: b"\x10\x00\x00\x00", "lz4 block size"),
}


@pytest.mark.parametrize("rejected", sorted(REJECTED))
def test_rejected_frames_raise_the_same_typed_error(
    rejected: str, liblz4: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    at, patch, message = REJECTED[rejected]
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
    assert message in str(errors[-1])


def test_corrupt_block_content_raises_a_typed_error_at_its_batch(liblz4: str) -> None:
    """Garbage inside a compressed block: liblz4 refuses it or it decodes to records that do not
    parse; either way a typed error naming the batch, never a crash or wrong rows."""
    rnd = random.Random(11)
    clean = _segment(FRAMINGS["ours"], value_size=200)
    for trial in range(30):
        at = 11 + rnd.randrange(200)
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
            else:  # garbage that still parses as records is possible: it must still be a valid table
                table.validate(full=True)
        with pytest.raises(CorruptRecordError):  # the CRC-32C catches every change
            read_arrow(data, topic="t", partition=0, path="p.log")


def test_decompression_cap(liblz4: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bomb over the (lowered) cap raises DecompressedSizeError; output at the cap decodes."""
    cap = 1 << 20
    monkeypatch.setattr(codecs, "MAX_DECOMPRESSED_BYTES", cap)
    zeros = b"\0" * (cap // 4)  # 8 of them: 2 MiB of zeros, ~8 KiB of lz4
    records: list[tuple[bytes, bytes, list[tuple[str, bytes]], int]] = [(b"k", zeros, [], 0)] * 8
    bomb = relz4(encode_batch(records, base_offset=0), FRAMINGS["ours"])
    assert len(bomb) < 16384
    before = encode_batch(sample_records(3), base_offset=0)
    with pytest.raises(DecompressedSizeError) as info:
        read_arrow(before + bomb, topic="t", partition=0, path="p.log")
    assert (info.value.path, info.value.position) == ("p.log", len(before))
    fits = relz4(encode_batch(records[:3], base_offset=0), FRAMINGS["ours"])
    table = read_arrow(fits, topic="t", partition=0)
    assert [len(v) for v in table.column("value").to_pylist()] == [cap // 4] * 3


def test_mixed_log_is_the_same_on_every_path(liblz4: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_mixed_log_same_on_every_path(lambda data: _python_path(data, monkeypatch))
