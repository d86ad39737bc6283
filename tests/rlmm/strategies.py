"""Hypothesis strategies for the remote log metadata value types."""

from __future__ import annotations

from hypothesis import strategies as st

from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm.serde import RemoteLogSegmentMetadataSnapshot

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
uuids = st.binary(min_size=16, max_size=16).map(KafkaUuid)
topic_names = st.text(min_size=1, max_size=40)
tips = st.builds(TopicIdPartition, uuids, topic_names, I32)
segment_ids = st.builds(RemoteLogSegmentId, tips, uuids)
custom = st.none() | st.binary(max_size=200)


@st.composite
def offsets_and_epochs(draw: st.DrawFn) -> tuple[int, int, tuple[tuple[int, int], ...]]:
    start = draw(st.integers(0, 2**62))
    end = draw(st.integers(start, 2**63 - 1))
    epochs = draw(st.dictionaries(I32, I64, min_size=1, max_size=6))
    return start, end, tuple(epochs.items())


@st.composite
def segment_metadata(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start, end, epochs = draw(offsets_and_epochs())
    return RemoteLogSegmentMetadata(
        draw(segment_ids), start, end, draw(I64), draw(I32), draw(I64), draw(I32), epochs,
        draw(st.sampled_from(RemoteLogSegmentState)), draw(custom), draw(st.booleans()))


@st.composite
def snapshots(draw: st.DrawFn) -> RemoteLogSegmentMetadataSnapshot:
    start, end, epochs = draw(offsets_and_epochs())
    return RemoteLogSegmentMetadataSnapshot(
        draw(uuids), start, end, draw(I64), draw(I32), draw(I64), draw(I32), epochs,
        draw(st.sampled_from(RemoteLogSegmentState)), draw(custom), draw(st.booleans()))


updates = st.builds(RemoteLogSegmentMetadataUpdate, segment_ids, I64,
                    st.sampled_from(RemoteLogSegmentState), I32, custom)
partition_deletes = st.builds(RemotePartitionDeleteMetadata, tips,
                              st.sampled_from(RemotePartitionDeleteState), I64, I32)
any_metadata = segment_metadata() | updates | partition_deletes | snapshots()
