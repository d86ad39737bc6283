"""CRC-32C, the compact custom-metadata encoding, and range checks."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlm.errors import RemoteRangeError, RemoteStorageError, RemoteStorageIntegrityError
from rsm_plugins import integrity, streams
from rsm_plugins.integrity import Crc32c, FileChecksum, LayoutCode, SegmentManifest
from rsm_plugins.layout import SegmentFileType


def test_crc32c_check_value() -> None:
    assert integrity.crc32c(b"123456789") == 0xE3069283  # the CRC-32C catalogue check value
    c = Crc32c()
    for part in (b"1234", bytearray(b"567"), memoryview(b"89")):
        c.update(part)
    assert c.result() == FileChecksum(0xE3069283, 9)


def test_golden_bytes() -> None:
    m = SegmentManifest(
        LayoutCode.S3,
        {
            SegmentFileType.SEGMENT: FileChecksum(0xE3069283, 300),
            SegmentFileType.PRODUCER_SNAPSHOT: FileChecksum(1, 2),
        },
        "bkt/p/",
    )
    blob = integrity.encode(m)
    assert blob == bytes.fromhex("a5 01 02 21  e3069283 ac02  00000001 02  06") + b"bkt/p/"
    assert integrity.decode(blob) == m


@given(
    st.dictionaries(
        st.sampled_from(list(SegmentFileType)),
        st.builds(FileChecksum, st.integers(0, 2**32 - 1), st.integers(0, 2**31 - 1)),
    ),
    st.sampled_from(list(LayoutCode)),
    st.one_of(st.none(), st.text(max_size=200)),
)
def test_round_trip_within_budget(
    files: dict[SegmentFileType, FileChecksum], layout: LayoutCode, location: str | None
) -> None:
    blob = integrity.encode(SegmentManifest(layout, files, location))
    assert len(blob) <= 128
    back = integrity.decode(blob)
    assert back is not None and back.files == files and back.layout is layout
    assert back.location in (location or None, None)


def test_foreign_or_absent_metadata_is_ignored() -> None:
    assert integrity.decode(None) is None
    assert integrity.decode(b"") is None
    assert integrity.decode(b'{"json": "from another plugin"}') is None


@pytest.mark.parametrize(
    "blob",
    [
        b"\xa5",  # truncated header
        b"\xa5\x02\x01\x00",  # unknown version
        b"\xa5\x01\x09\x00",  # unknown layout
        b"\xa5\x01\x01\x40",  # unknown file bit
        b"\xa5\x01\x01\x01\x00\x00",  # truncated checksum
        b"\xa5\x01\x01\x01\x00\x00\x00\x00\x80",  # truncated varint
        b"\xa5\x01\x01\x00\x05ab",  # location shorter than its length
    ],
)
def test_malformed_metadata_is_a_typed_error(blob: bytes) -> None:
    with pytest.raises(RemoteStorageIntegrityError, match="malformed"):
        integrity.decode(blob)


def test_budget_too_small() -> None:
    files = {ft: FileChecksum(1, 2**31 - 1) for ft in SegmentFileType}
    with pytest.raises(RemoteStorageError, match="above the budget of 20"):
        integrity.encode(SegmentManifest(LayoutCode.KAFKA, files), max_bytes=20)


def test_check_range() -> None:
    assert streams.check_range(0, None, 10, "x") == (0, 10)
    assert streams.check_range(3, 5, 10, "x") == (3, 6)
    assert streams.check_range(9, 100, 10, "x") == (9, 10)
    assert streams.check_range(0, None, 0, "x") == (0, 0)
    for start, end in ((10, None), (-1, 3), (5, 4), (1, None)):
        with pytest.raises(RemoteRangeError):
            streams.check_range(start, end, 10 if start != 1 else 0, "x")


def test_stream_verifies_at_the_end() -> None:
    data = b"0123456789" * 1000
    ok = streams.wrap(
        io.BytesIO(data), len(data), what="x", expected=FileChecksum(integrity.crc32c(data), 10000)
    )
    assert ok.read() == data
    bad = streams.wrap(io.BytesIO(data), len(data), what="obj", expected=FileChecksum(1, 10000))
    assert bad.read(5000) == data[:5000]
    with pytest.raises(RemoteStorageIntegrityError, match="obj: checksum mismatch"):
        bad.read()
    with pytest.raises(RemoteStorageIntegrityError, match="size"):
        streams.wrap(io.BytesIO(data), len(data), what="x", expected=FileChecksum(1, 5))
    short = streams.wrap(io.BytesIO(data[:10]), 20, what="short")
    with pytest.raises(RemoteStorageError, match="ended 10 bytes early"):
        short.read()


@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_crc32c_combine(a: bytes, b: bytes) -> None:
    assert integrity.crc32c_combine(integrity.crc32c(a), integrity.crc32c(b), len(b)) == integrity.crc32c(
        a + b
    )


class _ShortReads(io.RawIOBase):
    """A raw stream of ``data`` answering at most 3 MiB per ``readinto``, as a socket would."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(b).cast("B")
        n = min(len(view), len(self.data) - self.pos, 3 << 20)
        view[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n


class _Sink(io.BytesIO):
    """Keeps the object behind every write (alive, so that no two can share an address)."""

    def __init__(self) -> None:
        super().__init__()
        self.sources: list[object] = []

    def write(self, b: object) -> int:  # type: ignore[override]
        self.sources.append(memoryview(b).obj)  # type: ignore[arg-type]
        return super().write(b)  # type: ignore[arg-type]


def test_copy_to_writes_every_byte_from_one_reused_buffer() -> None:
    data = bytes(range(256)) * (80 * 1024 + 3)  # 20 MiB and a bit: several buffers' worth
    out = _Sink()
    assert streams.copy_to(streams.wrap(_ShortReads(data), len(data), what="x"), out) == len(data)
    assert out.getvalue() == data
    # every write comes from the same buffer, filled again each time (not a new bytes per read)
    assert len(out.sources) > 2 and all(s is out.sources[0] for s in out.sources)


def test_copy_to_checks_the_checksum_and_reads_plain_streams() -> None:
    data = b"0123456789" * 100_000
    with pytest.raises(RemoteStorageIntegrityError, match="obj: checksum mismatch"):
        streams.copy_to(streams.wrap(io.BytesIO(data), len(data), what="obj",
                                     expected=FileChecksum(1, len(data))), io.BytesIO())

    class ReadOnly:  # a plugin's BinaryIO without readinto
        def __init__(self) -> None:
            self.inner = io.BytesIO(data)

        def read(self, n: int = -1) -> bytes:
            return self.inner.read(min(n, 300_000))

    out = io.BytesIO()
    assert streams.copy_to(ReadOnly(), out, buffer_bytes=1 << 20) == len(data)
    assert out.getvalue() == data
