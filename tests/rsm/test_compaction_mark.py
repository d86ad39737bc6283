"""The compaction mark (rsm_plugins.compaction_mark): bytes, round trips, with a redirect and a
manifest, malformed input, and the budget the daemon fits it in (rlm.daemon.remote_compaction_mark)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlm.daemon.remote_compaction_mark import marked
from rlm.errors import RemoteStorageIntegrityError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rsm_plugins import compaction_mark, integrity, redirect
from rsm_plugins.compaction_mark import CompactionMark, CompactionMarkTooLarge
from rsm_plugins.integrity import FileChecksum, LayoutCode, SegmentManifest
from rsm_plugins.layout import SegmentFileType

ELSEWHERE = TopicIdPartition(KafkaUuid(bytes(range(16))), "old-orders", 3)
#: six files with a 1 GiB .log and a location that fills the default budget of 128 bytes
FULL = SegmentManifest(
    LayoutCode.S3,
    {ft: FileChecksum(0xDEADBEEF, 1 << 30 if ft is SegmentFileType.SEGMENT else 4096)
     for ft in SegmentFileType if ft is not SegmentFileType.DESCRIPTOR},
    "a-bucket-with-a-long-name/and/a/prefix/that/takes/most/of/the/room/left/xxxxxxx",  # 124 bytes
)


def test_golden_bytes() -> None:
    assert compaction_mark.encode(300, b"inner") == bytes.fromhex("a7 01 ac02") + b"inner"
    assert compaction_mark.encode(0, None) == bytes.fromhex("a7 01 00")
    assert compaction_mark.decode(bytes.fromhex("a7 01 00")) == CompactionMark(0, None)


_NOT_OURS = st.binary(max_size=200).filter(lambda b: b[:1] not in (bytes([redirect.MAGIC]),
                                                                    bytes([compaction_mark.MAGIC])))


@given(st.integers(0, 2**63 - 1), st.one_of(st.none(), _NOT_OURS))
def test_round_trip(clean_end: int, inner: bytes | None) -> None:
    blob = compaction_mark.encode(clean_end, inner)
    assert len(blob) == compaction_mark.overhead(clean_end) + len(inner or b"")
    assert compaction_mark.decode(blob) == CompactionMark(clean_end, inner or None)
    assert compaction_mark.inner_custom_metadata(blob) == (inner or None)


def test_plugin_blob_that_looks_like_a_broken_redirect() -> None:
    """Another plugin's custom metadata starting with the redirect's magic byte: encode says so
    (typed), and the daemon publishes it unmarked rather than fail the compaction."""
    with pytest.raises(RemoteStorageIntegrityError, match=r"redirect .* malformed"):
        compaction_mark.encode(7, b"\xa6xyz")
    assert marked(b"\xa6xyz", 7, 128) == b"\xa6xyz"


def test_a_mark_is_replaced_never_nested() -> None:
    once = compaction_mark.encode(10, b"x")
    assert compaction_mark.encode(99, once) == compaction_mark.encode(99, b"x")


def test_manifest_is_read_through_the_mark() -> None:
    manifest = integrity.encode(FULL)
    blob = compaction_mark.encode(1234, manifest)
    assert integrity.decode(blob) == FULL
    assert redirect.decode(blob) is None and redirect.stored_partition(_segment(blob)) == _segment(blob) \
        .topic_id_partition


def test_adopted_compacted_segment_redirect_outermost() -> None:
    """Adoption wraps a marked segment (redirect around the mark); marking an adopted segment puts
    the mark under its redirect: either way each decoder finds its part."""
    manifest = integrity.encode(FULL, 90)
    adopted_after = redirect.encode(ELSEWHERE, compaction_mark.encode(500, manifest))
    marked_after = compaction_mark.encode(500, redirect.encode(ELSEWHERE, manifest))
    assert adopted_after == marked_after
    for blob in (adopted_after, marked_after):
        assert blob[0] == redirect.MAGIC
        found = redirect.decode(blob)
        assert found is not None and found.stored == ELSEWHERE
        assert compaction_mark.decode(blob) == CompactionMark(500, manifest)
        assert integrity.decode(blob) == integrity.decode(manifest)
        assert compaction_mark.inner_custom_metadata(blob) == manifest


@pytest.mark.parametrize("blob", [None, b"", b"\x00", integrity.encode(FULL), b"\xa5\x01\x02\x00", b"crc:1"])
def test_no_mark(blob: bytes | None) -> None:
    assert compaction_mark.decode(blob) is None
    assert compaction_mark.inner_custom_metadata(blob) == (redirect.inner_custom_metadata(blob))


@pytest.mark.parametrize("blob, why", [
    (b"\xa7", "header needs 3"),
    (b"\xa7\x01", "header needs 3"),
    (b"\xa7\x02\x00", "unsupported version 2"),
    (b"\xa7\x01\x80", "truncated varint"),
    (b"\xa7\x01" + b"\xff" * 11, "varint too long"),
])
def test_malformed_is_a_typed_error_naming_it(blob: bytes, why: str) -> None:
    with pytest.raises(RemoteStorageIntegrityError, match=f"compaction mark .*malformed: .*{why}"):
        compaction_mark.decode(blob)
    with pytest.raises(RemoteStorageIntegrityError):
        integrity.decode(blob)  # a plugin reading the segment: not silently unchecked
    assert compaction_mark.clean_end_of([_segment(blob)]) == 0, "counts as unmarked for the checkpoint"


@given(st.binary(max_size=40))
def test_garbage_never_crashes(tail: bytes) -> None:
    for blob in (tail, b"\xa7" + tail, b"\xa7\x01" + tail):
        try:
            found = compaction_mark.decode(blob)
        except RemoteStorageIntegrityError:
            continue  # typed, naming what is wrong (tested above)
        assert found is None or found.clean_end >= 0


def test_negative_offset_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        compaction_mark.encode(-1, None)


def test_budget() -> None:
    with pytest.raises(CompactionMarkTooLarge, match="above the budget of 10"):
        compaction_mark.encode(1 << 40, b"12345", max_bytes=10)
    assert len(compaction_mark.encode(1 << 40, b"1234", max_bytes=12)) == 12


def test_marked_drops_the_manifest_location_to_fit() -> None:
    """The plugin filled the budget: the mark still fits, the location is the part left out."""
    full = integrity.encode(FULL, 128)
    assert len(full) > 120 and integrity.decode(full) == FULL
    blob = marked(full, 10**12, 128)
    assert blob is not None and len(blob) <= 128
    found = compaction_mark.decode(blob)
    assert found is not None and found.clean_end == 10**12
    got = integrity.decode(blob)
    assert got is not None and got.files == FULL.files and got.location is None
    small = integrity.encode(FULL, 60)
    assert marked(small, 5, 128) == compaction_mark.encode(5, small), "fits: nothing dropped"


def test_marked_leaves_the_mark_out_when_nothing_fits() -> None:
    """A budget too small for the checksums and the mark, or another plugin's blob at the limit:
    the plugin's custom metadata as it was (the copy stands, unmarked)."""
    sums = integrity.encode(FULL, 60)
    assert marked(sums, 5, len(sums)) == sums
    foreign = b"x" * 128
    assert marked(foreign, 5, 128) == foreign
    assert marked(None, 5, 0) is None


def test_clean_end_of_takes_the_largest_mark() -> None:
    segs = [_segment(None), _segment(compaction_mark.encode(40, None)), _segment(integrity.encode(FULL)),
            _segment(redirect.encode(ELSEWHERE, compaction_mark.encode(70, b"m"))),
            _segment(compaction_mark.encode(55, None))]
    assert compaction_mark.clean_end_of(segs) == 70
    assert compaction_mark.clean_end_of([]) == 0


def _segment(custom: bytes | None) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(KafkaUuid(bytes(16)), "orders", 0)
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, KafkaUuid(bytes([1] * 16))), start_offset=0, end_offset=9,
        max_timestamp_ms=0, broker_id=1, event_timestamp_ms=0, segment_size_in_bytes=1,
        segment_leader_epochs=((0, 0),), state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        custom_metadata=custom)
