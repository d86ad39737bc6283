"""Snappy batches decoded by the compiled loop's own snappy decoder, against the per-batch Python
path (cramjam), which the un-jitted decoder still takes.

Every snappy framing a producer may write (Kafka's xerial stream, several concatenated streams,
one raw block as librdkafka writes it; literals of every length encoding, short and long copies,
overlapping runs, stored-looking random data) must give the same table both ways; malformed
blocks must give the Python path's typed error at the batch's position, and random damage must
never make the two paths disagree (same table or same error).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

import cramjam
import numpy as np
import pytest

from rlm.errors import CorruptRecordError, DecompressedSizeError
from rlm.log import Compression, _kernel, codecs, encode_batch, iter_arrow_batches, read_arrow
from rlm.log.model import RECORD_BATCH_OVERHEAD
from tests.log_records._data import mixed_segment, recompress, sample_records
from tests.log_records._paths import assert_mixed_log_same_on_every_path, forbid_python_decompression

SNAPPY = int(Compression.SNAPPY)
XERIAL = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


def _xerial(data: bytes, block: int = 32 * 1024) -> bytes:
    out = [XERIAL]
    for i in range(0, len(data), block):
        raw = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += [struct.pack(">i", len(raw)), raw]
    return b"".join(out)


def _concatenated(data: bytes) -> bytes:
    half = len(data) // 2
    return _xerial(data[:half]) + _xerial(data[half:])


def _raw(data: bytes) -> bytes:  # librdkafka: one raw block, no framing
    return bytes(cramjam.snappy.compress_raw(data))


def _literal_varint(n: int) -> bytes:
    """Tag bytes of a literal of ``n`` bytes (1-4 length bytes after the tag from 61 on)."""
    if n <= 60:
        return bytes([(n - 1) << 2])
    m = n - 1
    k = (m.bit_length() + 7) // 8
    return bytes([(59 + k) << 2]) + m.to_bytes(k, "little")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _handmade(data: bytes) -> tuple[bytes, bytes]:
    """One raw block written by hand: each 100-byte slice as a literal, then a 32-bit-offset copy
    of it (copy-4, which compressors emit only past 64 KiB), so both element kinds appear."""
    body = bytearray()
    out = bytearray()
    for i in range(0, len(data), 100):
        chunk = data[i : i + 100]
        body += _literal_varint(len(chunk)) + chunk
        out += chunk
        if len(chunk) >= 8:
            n = min(len(chunk), 64)
            body += bytes([((n - 1) << 2) | 3]) + struct.pack("<I", len(chunk))
            out += chunk[:n]
    assert len(out) > len(data)
    return _varint(len(out)) + bytes(body), bytes(out)


FRAMINGS: dict[str, Callable[[bytes], bytes]] = {
    "ours": lambda d: codecs.compress(Compression.SNAPPY, d),
    "concatenated-streams": _concatenated,
    "raw-librdkafka": _raw,
    "small-blocks": lambda d: _xerial(d, block=1000),
}


def resnappy(batch: bytes, compress: Callable[[bytes], bytes]) -> bytes:
    return recompress(batch, SNAPPY, compress)


def _segment(framing: Callable[[bytes], bytes], *, batches: int = 12, value_size: int = 0) -> bytes:
    return mixed_segment(SNAPPY, framing, batches=batches, value_size=value_size)


@pytest.mark.parametrize("value_size", [0, 300, 70_000])
@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_every_framing_decodes_like_the_python_path(
    framing: str, value_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _segment(FRAMINGS[framing], value_size=value_size, batches=12 if value_size < 70_000 else 4)
    expected = read_arrow(data, topic="t", partition=0, pure_python=True)  # cramjam, per batch
    forbid_python_decompression(monkeypatch, "the snappy kernel")
    table = read_arrow(data, topic="t", partition=0)
    table.validate(full=True)
    assert table.equals(expected)
    for max_rows in (1, 7):
        got = list(iter_arrow_batches(data, topic="t", partition=0, max_batch_rows=max_rows))
        assert sum(b.num_rows for b in got) == expected.num_rows


def test_copy4_and_every_literal_length_encoding() -> None:
    """The compiled block decoder on a hand-written block (copy-4 elements, literals with 0-2
    extra length bytes) and on cramjam's output for lengths around each encoding's edge."""
    rnd = random.Random(5)
    data = rnd.randbytes(5000)
    block, want = _handmade(data)
    out = np.zeros(len(want) + 64, np.uint8)
    arr = np.frombuffer(block, np.uint8)
    assert _kernel._snappy_block(arr, 0, len(block), out, 0) == len(want)
    assert bytes(out[: len(want)]) == want == bytes(cramjam.snappy.decompress_raw(block))
    for n in (1, 59, 60, 61, 62, 255, 256, 257, 65536, 65537, 70_000):
        raw = _literal_varint(n) + bytes(range(256)) * (n // 256 + 1)
        block = _varint(n) + raw[: len(_literal_varint(n)) + n]
        arr = np.frombuffer(block, np.uint8)
        out = np.zeros(n + 32, np.uint8)
        assert _kernel._snappy_block(arr, 0, len(block), out, 0) == n
        assert bytes(out[:n]) == bytes(cramjam.snappy.decompress_raw(block))


def _copy_element(n: int, offset: int, kind: int) -> bytes:
    """A copy of ``n`` bytes from ``offset`` back, as a copy-1 (``kind`` 1), copy-2 or copy-4."""
    if kind == 1:
        return bytes([0x01 | ((n - 4) << 2) | ((offset >> 8) << 5), offset & 0xFF])
    return bytes([kind | ((n - 1) << 2)]) + offset.to_bytes(2 if kind == 2 else 4, "little")


def _every_copy_block() -> tuple[bytes, bytes]:
    """One raw block with a copy of every length (4-64) from every offset 1-24 and a few far
    ones, in each encoding that can express it: the overlapping runs (offset < length), the
    8-byte-piece copies and the ones past 16 bytes."""
    seed = bytes(range(65, 65 + 40))
    body = bytearray(_literal_varint(len(seed)) + seed)
    out = bytearray(seed)
    for offset in [*range(1, 25), 40, 300, 2047]:
        for n in range(4, 65):
            for kind in (1, 2, 3):
                if kind == 1 and (n > 11 or offset > 2047):
                    continue
                if offset > len(out):
                    continue
                body += _copy_element(n, offset, kind)
                for _ in range(n):
                    out.append(out[-offset])
    return _varint(len(out)) + bytes(body), bytes(out)


@pytest.mark.parametrize("pure", [False, True], ids=["jit", "pure"])
def test_every_copy_length_and_offset(pure: bool) -> None:
    """Copies of every length from every short offset, decoded into a buffer with room past the
    output (the fixed-size paths) and into one with none (every element near its end takes the
    exact-length path), equal cramjam's output; and the block's last element a copy that ends at
    the very end of the input (no 4-byte load past it)."""
    kern = _kernel.load_pure() if pure else _kernel
    block, want = _every_copy_block()
    assert bytes(cramjam.snappy.decompress_raw(block)) == want
    arr = np.frombuffer(block, np.uint8)
    for slack in (0, 64):
        out = np.zeros(len(want) + slack, np.uint8)
        assert kern._snappy_block(arr, np.int64(0), np.int64(len(block)), out, np.int64(0)) == len(want)
        assert bytes(out[: len(want)]) == want
    for offset in range(1, 17):  # a run that ends the output, into a buffer with no room past it
        for n in (4, 11, 16, 17):
            seed = bytes(range(97, 97 + offset))
            short = np.frombuffer(
                _varint(offset + n) + _literal_varint(offset) + seed + _copy_element(n, offset, 2), np.uint8
            )
            out = np.zeros(offset + n, np.uint8)
            assert (
                kern._snappy_block(short, np.int64(0), np.int64(len(short)), out, np.int64(0)) == offset + n
            )
            assert bytes(out) == (seed * 40)[: offset + n]
    for cut in range(1, 6):  # input that ends inside the last copy's offset bytes
        short = np.frombuffer(block[:-cut], np.uint8)
        out = np.zeros(len(want) + 64, np.uint8)
        assert kern._snappy_block(short, np.int64(0), np.int64(len(short)), out, np.int64(0)) == -1


@pytest.mark.parametrize("pure", [False, True], ids=["jit", "pure"])
def test_malformed_blocks_are_refused(pure: bool) -> None:
    kern = _kernel.load_pure() if pure else _kernel
    good = _raw(b"abcdefgh" * 20 + b"xyz")

    def run(block: bytes) -> int:
        buf: object = memoryview(block) if pure else np.frombuffer(block, np.uint8)
        out: object = memoryview(bytearray(4096)) if pure else np.zeros(4096, np.uint8)
        return int(kern._snappy_block(buf, np.int64(0), np.int64(len(block)), out, np.int64(0)))

    assert run(good) == 163
    assert run(good[:-1]) == -1  # input ends inside the last element
    assert run(_varint(164) + good[len(_varint(163)) :]) == -1  # declares more than it makes
    assert run(_varint(10) + good[len(_varint(163)) :]) == -1  # output past the declared length
    assert run(_varint(8) + bytes([0x01 | (3 << 2), 0x00])) == -1  # copy with offset 0
    assert run(_varint(8) + _literal_varint(1) + b"a" + bytes([0x01 | (3 << 2), 0x02])) == -1  # before start
    assert run(b"\xff\xff\xff\xff\xff\x01") == -1  # preamble varint over 32 bits


def _damage(data: bytes, batch: int, rnd: random.Random) -> tuple[bytes, int]:
    pos = 0
    for _ in range(batch):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
    bad = bytearray(data)
    for _ in range(rnd.randrange(1, 4)):
        at = pos + RECORD_BATCH_OVERHEAD + rnd.randrange(size - RECORD_BATCH_OVERHEAD)
        bad[at] = rnd.randrange(256)
    return bytes(bad), pos


def _outcome(data: bytes, pure: bool) -> object:
    try:
        table = read_arrow(data, topic="t", partition=0, verify_crc=False, path="p.log", pure_python=pure)
    except CorruptRecordError as e:
        return (type(e).__name__, e.path, e.position, str(e))
    table.validate(full=True)
    return table.to_pydict()


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_damaged_payloads_give_the_same_outcome_both_ways(framing: str) -> None:
    """Random bytes changed in a snappy payload (CRC not checked): the compiled decoder and
    cramjam's agree, same rows or same typed error at the same position."""
    clean = _segment(FRAMINGS[framing], value_size=200, batches=6)
    rnd = random.Random(framing)
    for _ in range(40):
        data, _pos = _damage(clean, rnd.choice([1, 2, 4, 5]), rnd)
        assert _outcome(data, False) == _outcome(data, True)


def test_decompression_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    cap = 1 << 20
    monkeypatch.setattr(codecs, "MAX_DECOMPRESSED_BYTES", cap)
    zeros = b"\0" * (cap // 4)
    records: list[tuple[bytes, bytes, list[tuple[str, bytes]], int]] = [(b"k", zeros, [], 0)] * 8
    bomb = resnappy(encode_batch(records, base_offset=0), FRAMINGS["ours"])
    before = encode_batch(sample_records(3), base_offset=0)
    for pure in (False, True):
        with pytest.raises(DecompressedSizeError) as info:
            read_arrow(before + bomb, topic="t", partition=0, path="p.log", pure_python=pure)
        assert (info.value.path, info.value.position) == ("p.log", len(before))


def test_mixed_log_is_the_same_both_ways() -> None:
    assert_mixed_log_same_on_every_path()
