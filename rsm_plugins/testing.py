"""The contract kit: one pytest suite that every storage plugin runs, a third party's included.

Usage (see ``docs/plugins.md``)::

    from rsm_plugins.testing import RemoteStorageManagerContract

    class TestMyPlugin(RemoteStorageManagerContract):
        large_segment_bytes = 12 << 20          # above the plugin's multipart threshold

        @pytest.fixture
        def rsm(self, tmp_path):
            plugin = rsm_plugins.load("my-plugin", {...})
            yield plugin
            plugin.close()

The suite checks byte-identical round trips of every file, inclusive range reads (first byte,
last byte, whole file, past the end), every index type, the missing transaction index,
idempotent copy and delete, not-found after delete, concurrent copies, a segment above the
multipart threshold, pickling, checksum verification, and that a copy failing in the middle
(through :class:`FaultInjectingRSM`) leaves nothing visible. Segment files hold random bytes:
plugins store bytes, they do not parse them.
"""

from __future__ import annotations

import os
import pickle
import random
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, ClassVar

import pytest

from rlm.errors import (
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageIntegrityError,
)
from rlm.types import (
    IndexType,
    KafkaUuid,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

from . import integrity
from .api import RemoteStorageManager
from .faults import Call, FaultInjectingRSM
from .integrity import FileChecksum
from .layout import SegmentFileType

__all__ = [
    "Call",
    "FaultInjectingRSM",
    "RemoteStorageManagerContract",
    "Segment",
    "SegmentFactory",
    "finished",
    "read_all",
]

INDEX_FILES = {
    IndexType.OFFSET: SegmentFileType.OFFSET_INDEX,
    IndexType.TIMESTAMP: SegmentFileType.TIME_INDEX,
    IndexType.TRANSACTION: SegmentFileType.TRANSACTION_INDEX,
    IndexType.LEADER_EPOCH: SegmentFileType.LEADER_EPOCH_CHECKPOINT,
    IndexType.PRODUCER_SNAPSHOT: SegmentFileType.PRODUCER_SNAPSHOT,
}


@dataclass(frozen=True)
class Segment:
    """A segment's metadata, the :class:`LogSegmentData` to copy, and the bytes of each file."""

    metadata: RemoteLogSegmentMetadata
    data: LogSegmentData
    contents: dict[SegmentFileType, bytes]

    @property
    def log(self) -> bytes:
        return self.contents[SegmentFileType.SEGMENT]


class SegmentFactory:
    """Writes segment files with random content under ``directory``."""

    def __init__(self, directory: Path, seed: int | None = None) -> None:
        self.directory = directory
        self.rng = random.Random(seed)
        self.topic_id = KafkaUuid.random()

    def make(
        self,
        log_bytes: int = 300_000,
        *,
        txn_index: bool = True,
        partition: int = 0,
        start_offset: int | None = None,
        segment_id: RemoteLogSegmentId | None = None,
        topic: str = "contract-topic",
        empty_indexes: bool = False,
    ) -> Segment:
        tp = TopicIdPartition(self.topic_id, topic, partition)
        seg_id = segment_id or RemoteLogSegmentId.generate_new(tp)
        start = self.rng.randrange(0, 10**12) if start_offset is None else start_offset
        d = self.directory / f"{seg_id.id.raw.hex()}-{self.rng.getrandbits(32):08x}"
        d.mkdir(parents=True)
        contents = {
            SegmentFileType.SEGMENT: os.urandom(log_bytes),
            SegmentFileType.OFFSET_INDEX: os.urandom(8 * self.rng.randrange(1, 2000)),
            SegmentFileType.TIME_INDEX: os.urandom(12 * self.rng.randrange(1, 2000)),
            SegmentFileType.PRODUCER_SNAPSHOT: os.urandom(self.rng.randrange(30, 4000)),
            SegmentFileType.LEADER_EPOCH_CHECKPOINT: f"0\n1\n0 {start}\n".encode(),
        }
        if txn_index:
            contents[SegmentFileType.TRANSACTION_INDEX] = os.urandom(34 * self.rng.randrange(1, 100))
        if empty_indexes:  # a segment below index.interval.bytes has empty index files
            for ft in (
                SegmentFileType.OFFSET_INDEX,
                SegmentFileType.TIME_INDEX,
                SegmentFileType.TRANSACTION_INDEX,
            ):
                if ft in contents:
                    contents[ft] = b""
        paths: dict[SegmentFileType, Path] = {}
        for ft, blob in contents.items():
            if ft is not SegmentFileType.LEADER_EPOCH_CHECKPOINT:
                paths[ft] = d / f"{start:020d}{ft.suffix}"
                paths[ft].write_bytes(blob)
        data = LogSegmentData(
            log_segment=paths[SegmentFileType.SEGMENT],
            offset_index=paths[SegmentFileType.OFFSET_INDEX],
            time_index=paths[SegmentFileType.TIME_INDEX],
            transaction_index=paths.get(SegmentFileType.TRANSACTION_INDEX),
            producer_snapshot_index=paths[SegmentFileType.PRODUCER_SNAPSHOT],
            leader_epoch_index=contents[SegmentFileType.LEADER_EPOCH_CHECKPOINT],
        )
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=seg_id,
            start_offset=start,
            end_offset=start + 999,
            max_timestamp_ms=1_700_000_000_000,
            broker_id=0,
            event_timestamp_ms=1_700_000_000_001,
            segment_size_in_bytes=log_bytes,
            segment_leader_epochs=((0, start),),
        )
        return Segment(md, data, contents)


def finished(md: RemoteLogSegmentMetadata, custom: bytes | None) -> RemoteLogSegmentMetadata:
    """The metadata a reader gets after the copy: COPY_SEGMENT_FINISHED with the custom metadata."""
    return replace(md, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED, custom_metadata=custom)


def read_all(stream: BinaryIO) -> bytes:
    """Read a fetched stream to the end and close it (errors found at the end, e.g. a checksum
    mismatch, are raised here)."""
    with stream as f:
        return f.read()


class RemoteStorageManagerContract:
    """Base class of the contract suite. Subclass it (name the subclass ``Test...``) and override
    the :meth:`rsm` fixture to yield a configured plugin; tune the class attributes if needed."""

    #: Size of the segment for the multipart test; set it above the plugin's multipart threshold.
    large_segment_bytes: ClassVar[int] = 12 << 20
    #: Size of an ordinary test segment.
    segment_bytes: ClassVar[int] = 300_000
    #: Number of segments copied at the same time in the concurrency test.
    concurrent_copies: ClassVar[int] = 4
    #: Whether the plugin records checksums with :mod:`rsm_plugins.integrity` in its custom metadata.
    records_checksums: ClassVar[bool] = True
    #: The broker's cap on custom metadata (``remote.log.metadata.custom.metadata.max.bytes``).
    custom_metadata_max_bytes: ClassVar[int] = 128
    #: Whether the plugin implements the optional published log start offset
    #: (:meth:`RemoteStorageManager.write_log_start_offset`); ``False`` checks the defaults instead.
    stores_log_start: ClassVar[bool] = True

    @pytest.fixture
    def rsm(self) -> Iterator[RemoteStorageManager]:
        """Override: yield a configured plugin (fresh, or at least isolated per test)."""
        raise NotImplementedError("override the 'rsm' fixture in your RemoteStorageManagerContract subclass")
        yield  # pragma: no cover

    @pytest.fixture
    def segments(self, tmp_path: Path) -> SegmentFactory:
        return SegmentFactory(tmp_path / "segments")

    # ---- helpers ----------------------------------------------------------------------------
    def copy(self, rsm: RemoteStorageManager, seg: Segment) -> RemoteLogSegmentMetadata:
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
        if custom is not None:
            assert isinstance(custom, bytes)
            assert len(custom) <= self.custom_metadata_max_bytes, f"custom metadata of {len(custom)} bytes"
        return finished(seg.metadata, custom)

    def assert_round_trip(
        self, rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, seg: Segment
    ) -> None:
        assert read_all(rsm.fetch_log_segment(md, 0)) == seg.log
        for index_type, ft in INDEX_FILES.items():
            if ft in seg.contents:
                got = read_all(rsm.fetch_index(md, index_type))
                assert got == seg.contents[ft], f"{index_type.name} differs"

    def assert_gone(self, rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata) -> None:
        with pytest.raises(RemoteResourceNotFoundError):
            read_all(rsm.fetch_log_segment(md, 0))
        for index_type in IndexType:
            with pytest.raises(RemoteResourceNotFoundError):
                read_all(rsm.fetch_index(md, index_type))

    # ---- the contract -----------------------------------------------------------------------
    def test_round_trip_every_file(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        seg = segments.make(self.segment_bytes)
        md = self.copy(rsm, seg)
        self.assert_round_trip(rsm, md, seg)

    @pytest.mark.parametrize("index_type", list(IndexType), ids=lambda t: t.name)
    def test_fetch_index(
        self, rsm: RemoteStorageManager, segments: SegmentFactory, index_type: IndexType
    ) -> None:
        seg = segments.make(1000)
        md = self.copy(rsm, seg)
        assert read_all(rsm.fetch_index(md, index_type)) == seg.contents[INDEX_FILES[index_type]]

    def test_empty_index_files(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        seg = segments.make(500, empty_indexes=True)
        md = self.copy(rsm, seg)
        for index_type in (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION):
            assert read_all(rsm.fetch_index(md, index_type)) == b""
        self.assert_round_trip(rsm, md, seg)

    def test_range_reads(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        seg = segments.make(self.segment_bytes)
        md = self.copy(rsm, seg)
        data, n = seg.log, len(seg.log)

        def rng(start: int, end: int | None) -> bytes:
            return read_all(rsm.fetch_log_segment(md, start, end))

        assert rng(0, 0) == data[:1]
        assert rng(n - 1, n - 1) == data[-1:]
        assert rng(n - 1, None) == data[-1:]
        assert rng(0, n - 1) == data
        assert rng(0, None) == data
        assert rng(1234, 99_999) == data[1234:100_000]
        assert rng(n // 2, None) == data[n // 2 :]
        assert rng(n - 10, n + 10_000) == data[-10:], "an end past the object is clamped"
        for start, end in ((n, None), (n + 1, n + 5), (-1, 10), (10, 9)):
            with pytest.raises(RemoteRangeError):
                rng(start, end)

    def _wrong_log_checksum(self, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """``md`` with the ``.log``'s recorded CRC-32C off by one bit, or None when the plugin
        records no checksums (nothing to check a whole-file read against)."""
        manifest = integrity.decode(md.custom_metadata)
        if not self.records_checksums or manifest is None:
            return None
        files = dict(manifest.files)
        cs = files[SegmentFileType.SEGMENT]
        files[SegmentFileType.SEGMENT] = FileChecksum(cs.crc32c ^ 1, cs.size)
        return replace(md, custom_metadata=integrity.encode(replace(manifest, files=files)))

    def test_read_log_segment_range(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        """The read core's chunk reads: the same bytes as :meth:`fetch_log_segment`'s stream, the
        same errors, and a whole-file read checked against the recorded checksum."""
        seg = segments.make(self.segment_bytes)
        md = self.copy(rsm, seg)
        data, n = seg.log, len(seg.log)
        for start, end in ((0, 0), (0, n - 1), (1234, 99_999), (n // 2, n - 1), (n - 1, n - 1)):
            got = rsm.read_log_segment_range(md, start, end)
            assert isinstance(got, bytes) and got == data[start : end + 1], (start, end)
        assert rsm.read_log_segment_range(md, n - 10, n + 10_000) == data[-10:], "the end is clamped"
        for start, end in ((n, n + 5), (-1, 10), (10, 9)):
            with pytest.raises(RemoteRangeError):
                rsm.read_log_segment_range(md, start, end)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.read_log_segment_range(segments.make(10).metadata, 0, 9)
        bad = self._wrong_log_checksum(md)
        if bad is not None:
            with pytest.raises(RemoteStorageIntegrityError):
                rsm.read_log_segment_range(bad, 0, n - 1)
            assert rsm.read_log_segment_range(bad, 1, n - 1) == data[1:], "a part is not checked"

    def test_read_log_segment_range_into(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        """A plugin that receives a scan's chunks into the read core's buffers
        (``read_log_segment_range_into``, optional) fills exactly what
        :meth:`read_log_segment_range` returns, says how many bytes, and fails the same way. A
        plugin without it is checked through the copy the read core then makes (its
        :meth:`read_log_segment_range` copied into the buffer), so every plugin runs this test."""
        into = getattr(rsm, "read_log_segment_range_into", None) or _copying_into(rsm)
        seg = segments.make(self.segment_bytes)
        md = self.copy(rsm, seg)
        data, n = seg.log, len(seg.log)
        for start, length in ((0, n), (1234, 98_766), (n // 2, n - n // 2), (n - 1, 1), (5, 0)):
            buf = bytearray(b"\xee" * (length + 16))
            assert into(md, start, memoryview(buf)[:length]) == length, (start, length)
            assert buf[:length] == data[start:start + length], (start, length)
            assert buf[length:] == b"\xee" * 16, "nothing written past the buffer's view"
        buf = bytearray(64)
        assert into(md, n - 10, memoryview(buf)) == 10, "fewer bytes at the object's end"
        assert buf[:10] == data[-10:]
        for start in (n, -1):
            with pytest.raises(RemoteRangeError):
                into(md, start, memoryview(bytearray(8)))
        with pytest.raises(RemoteResourceNotFoundError):
            into(segments.make(10).metadata, 0, memoryview(bytearray(10)))
        bad = self._wrong_log_checksum(md)
        if bad is not None:
            with pytest.raises(RemoteStorageIntegrityError):
                into(bad, 0, memoryview(bytearray(n)))
            part = bytearray(n - 1)
            assert into(bad, 1, memoryview(part)) == n - 1 and part == data[1:], "a part is not checked"

    def test_partial_reads_of_a_stream(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        seg = segments.make(self.segment_bytes)
        md = self.copy(rsm, seg)
        with rsm.fetch_log_segment(md, 100, 200_099) as f:
            parts = [f.read(7), f.read(1 << 16), f.read()]
            assert f.read() == b""
        assert b"".join(parts) == seg.log[100:200_100]

    def test_missing_transaction_index(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        seg = segments.make(5000, txn_index=False)
        md = self.copy(rsm, seg)
        with pytest.raises(RemoteResourceNotFoundError):
            read_all(rsm.fetch_index(md, IndexType.TRANSACTION))
        self.assert_round_trip(rsm, md, seg)

    def test_idempotent_copy_overwrites(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        first = segments.make(20_000)
        self.copy(rsm, first)
        again = segments.make(
            30_000,
            txn_index=False,
            segment_id=first.metadata.remote_log_segment_id,
            start_offset=first.metadata.start_offset,
        )
        md = self.copy(rsm, again)
        self.assert_round_trip(rsm, md, again)
        with pytest.raises(RemoteResourceNotFoundError):
            read_all(rsm.fetch_index(md, IndexType.TRANSACTION))
        md2 = self.copy(rsm, again)
        self.assert_round_trip(rsm, md2, again)

    def test_idempotent_delete(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        seg = segments.make(10_000)
        md = self.copy(rsm, seg)
        rsm.delete_log_segment_data(md)
        self.assert_gone(rsm, md)
        rsm.delete_log_segment_data(md)
        never = segments.make(10)
        rsm.delete_log_segment_data(never.metadata)

    def test_delete_leaves_other_segments(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        a, b = segments.make(10_000), segments.make(10_000)
        md_a, md_b = self.copy(rsm, a), self.copy(rsm, b)
        rsm.delete_log_segment_data(md_a)
        self.assert_gone(rsm, md_a)
        self.assert_round_trip(rsm, md_b, b)

    def test_fetch_never_copied(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        self.assert_gone(rsm, segments.make(10).metadata)

    def test_concurrent_copies(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        segs = [segments.make(self.segment_bytes, partition=i % 2) for i in range(self.concurrent_copies)]
        with ThreadPoolExecutor(self.concurrent_copies) as pool:
            mds = list(pool.map(lambda s: self.copy(rsm, s), segs))
        for md, seg in zip(mds, segs, strict=True):
            self.assert_round_trip(rsm, md, seg)

    def test_segment_over_multipart_threshold(
        self, rsm: RemoteStorageManager, segments: SegmentFactory
    ) -> None:
        seg = segments.make(self.large_segment_bytes)
        md = self.copy(rsm, seg)
        self.assert_round_trip(rsm, md, seg)
        mid = self.large_segment_bytes // 2
        got = read_all(rsm.fetch_log_segment(md, mid - 3_000_000, mid + 2_999_999))
        assert got == seg.log[mid - 3_000_000 : mid + 3_000_000]

    @pytest.mark.parametrize(
        ("file_type", "fraction", "large"),
        [
            (SegmentFileType.SEGMENT, 0.5, False),
            (SegmentFileType.SEGMENT, 0.7, True),
            (SegmentFileType.PRODUCER_SNAPSHOT, 0.5, False),
            (SegmentFileType.OFFSET_INDEX, 0.0, False),
        ],
        ids=["log-half", "log-multipart", "snapshot", "offset-index-start"],
    )
    def test_failure_mid_copy_leaves_nothing(
        self,
        rsm: RemoteStorageManager,
        segments: SegmentFactory,
        file_type: SegmentFileType,
        fraction: float,
        large: bool,
    ) -> None:
        seg = segments.make(self.large_segment_bytes if large else self.segment_bytes)
        faulty = FaultInjectingRSM(rsm)
        faulty.fail_source_read(file_type, after_bytes=int(len(seg.contents[file_type]) * fraction))
        with pytest.raises(RemoteStorageError):
            faulty.copy_log_segment_data(seg.metadata, seg.data)
        assert faulty.count("copy", failed=True) == 1
        self.assert_gone(rsm, seg.metadata)
        md = self.copy(rsm, seg)  # a retry with the fault gone succeeds
        self.assert_round_trip(rsm, md, seg)

    def test_failed_overwrite_leaves_nothing(
        self, rsm: RemoteStorageManager, segments: SegmentFactory
    ) -> None:
        seg = segments.make(self.segment_bytes)
        self.copy(rsm, seg)
        faulty = FaultInjectingRSM(rsm)
        faulty.fail_source_read(SegmentFileType.SEGMENT, after_bytes=len(seg.log) // 3)
        with pytest.raises(RemoteStorageError):
            faulty.copy_log_segment_data(seg.metadata, seg.data)
        with pytest.raises(RemoteResourceNotFoundError):
            read_all(rsm.fetch_log_segment(seg.metadata, 0))

    def test_pickle_round_trip(self, rsm: RemoteStorageManager, segments: SegmentFactory) -> None:
        seg = segments.make(self.segment_bytes)
        md = self.copy(rsm, seg)  # the plugin has now created whatever clients it caches
        clone = pickle.loads(pickle.dumps(rsm))
        try:
            self.assert_round_trip(clone, md, seg)
            seg2 = segments.make(1000)
            md2 = self.copy(clone, seg2)
            self.assert_round_trip(rsm, md2, seg2)
        finally:
            clone.close()

    def test_checksums_recorded_and_verified(
        self, rsm: RemoteStorageManager, segments: SegmentFactory
    ) -> None:
        seg = segments.make(self.segment_bytes)
        md = self.copy(rsm, seg)
        manifest = integrity.decode(md.custom_metadata)
        if not self.records_checksums:
            assert manifest is None
            return
        assert manifest is not None, "the plugin returned no checksums in its custom metadata"
        for ft, blob in seg.contents.items():
            assert manifest.checksum(ft) == FileChecksum(integrity.crc32c(blob), len(blob)), ft
        wrong = dict(manifest.files)
        cs = wrong[SegmentFileType.SEGMENT]
        wrong[SegmentFileType.SEGMENT] = FileChecksum(cs.crc32c ^ 1, cs.size)
        wrong[SegmentFileType.OFFSET_INDEX] = FileChecksum(
            wrong[SegmentFileType.OFFSET_INDEX].crc32c ^ 1, wrong[SegmentFileType.OFFSET_INDEX].size
        )
        bad = replace(md, custom_metadata=integrity.encode(replace(manifest, files=wrong)))
        with pytest.raises(RemoteStorageIntegrityError):
            read_all(rsm.fetch_log_segment(bad, 0))
        with pytest.raises(RemoteStorageIntegrityError):
            read_all(rsm.fetch_index(bad, IndexType.OFFSET))
        # a partial range cannot be checked against a whole-file checksum, and is served
        assert read_all(rsm.fetch_log_segment(bad, 1)) == seg.log[1:]

    # ---- optional: the published log start offset ---------------------------------------------
    def test_log_start_offset_round_trip(
        self, rsm: RemoteStorageManager, segments: SegmentFactory
    ) -> None:
        a = segments.make(1000, partition=0).metadata.topic_id_partition
        b = segments.make(1000, partition=1).metadata.topic_id_partition
        assert rsm.read_log_start_offset(a) is None  # nothing published: readers fall back
        if not self.stores_log_start:
            assert rsm.write_log_start_offset(a, 5) is False
            assert rsm.read_log_start_offset(a) is None
            return
        assert rsm.write_log_start_offset(a, 2793) is True
        assert rsm.read_log_start_offset(a) == 2793
        assert rsm.read_log_start_offset(b) is None  # per partition
        assert rsm.write_log_start_offset(a, 5000) is True  # overwritten in place
        assert rsm.read_log_start_offset(a) == 5000
        assert pickle.loads(pickle.dumps(rsm)).read_log_start_offset(a) == 5000  # Spark executors
        rsm.delete_log_start_offset(a)  # the partition was deleted
        assert rsm.read_log_start_offset(a) is None
        rsm.delete_log_start_offset(a)  # idempotent

    def test_log_start_offset_beside_segments(
        self, rsm: RemoteStorageManager, segments: SegmentFactory
    ) -> None:
        """The object lives with the partition's segments but is not one: copies and deletes leave
        it alone, and the partition listing (``rlm verify``'s orphan check) does not show it. A
        plugin that does not store it says so and leaves nothing beside the segment either."""
        seg = segments.make(10_000)
        tp = seg.metadata.topic_id_partition
        md = self.copy(rsm, seg)
        assert rsm.write_log_start_offset(tp, 7) is self.stores_log_start
        listing = rsm.list_segment_objects(tp)
        if listing is not None:
            assert {o.segment_id for o in listing} == {md.remote_log_segment_id.id.text}, listing
        rsm.delete_log_segment_data(md)
        assert rsm.read_log_start_offset(tp) == (7 if self.stores_log_start else None)
        self.assert_gone(rsm, md)

    def test_segment_descriptor_and_partition_listing(
        self, rsm: RemoteStorageManager, segments: SegmentFactory
    ) -> None:
        """The optional self-description (``rlm metadata rebuild``): a descriptor stored beside a
        segment reads back, shows in the listing as the segment's, goes with the segment's delete;
        the plugin lists the partitions it holds. Plugins without them keep the defaults."""
        from . import descriptor

        seg = segments.make(1000, partition=3)
        tp = seg.metadata.topic_id_partition
        md = self.copy(rsm, seg)
        assert rsm.read_segment_descriptor(md) is None  # the copy alone writes none
        parts = rsm.list_partitions()
        if parts is not None:
            assert tp in parts, parts
        if not rsm.write_segment_descriptor(md, descriptor.encode(md)):
            assert rsm.read_segment_descriptor(md) is None
            return
        data = rsm.read_segment_descriptor(md)
        assert data is not None and descriptor.decode(data, "test", md.remote_log_segment_id) == md
        listing = rsm.list_segment_objects(tp)
        if listing is not None:
            kinds = {o.file_type for o in listing if o.segment_id == md.remote_log_segment_id.id.text}
            assert SegmentFileType.DESCRIPTOR in kinds and SegmentFileType.SEGMENT in kinds, listing
        rsm.delete_log_segment_data(md)
        assert rsm.read_segment_descriptor(md) is None
        self.assert_gone(rsm, md)


def _copying_into(rsm: RemoteStorageManager) -> Callable[[RemoteLogSegmentMetadata, int, memoryview], int]:
    """What the read core does for a plugin without ``read_log_segment_range_into``
    (``fetcher.reader.SegmentReader.get_range_into``): the range read, copied into ``out``; the
    bytes the plugin returned."""

    def into(md: RemoteLogSegmentMetadata, start: int, out: memoryview) -> int:
        if not len(out):
            return 0
        data = rsm.read_log_segment_range(md, start, start + len(out) - 1)
        n = min(len(data), len(out))
        out[:n] = data[:n]
        return len(data)

    return into
