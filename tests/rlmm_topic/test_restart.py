"""Fast restart: snapshots + ``_rlmm_committed_offsets``, and every way they can be unusable.

Counters on the manager (``stats``) show what a start did: which metadata partitions came from
a snapshot, how many records were consumed afterwards, which were replayed from the beginning.
Whatever the start path, the state must equal what a full replay of the topic gives.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from rlm.errors import RemoteLogMetadataError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.snapshot_files import COMMITTED_OFFSETS_FILE, read_committed_offsets, snapshot_path
from rlmm.topic import TopicBasedRemoteLogMetadataManager
from tests.services.kafka import KafkaCluster

pytestmark = pytest.mark.kafka

S = RemoteLogSegmentState
Opener = Callable[..., TopicBasedRemoteLogMetadataManager]


@pytest.fixture
def open_rlmm(kafka: KafkaCluster, unique_topic: str, tmp_path: Path) -> Iterator[Opener]:
    """Opens managers on one fresh metadata topic; ``log_dir`` defaults to a shared one."""
    topic = f"__rlmm_restart_{unique_topic}"[:249]
    made: list[TopicBasedRemoteLogMetadataManager] = []

    def open_(log_dir: Path | None = None, **extra: Any) -> TopicBasedRemoteLogMetadataManager:
        m = TopicBasedRemoteLogMetadataManager({
            "bootstrap.servers": kafka.bootstrap, "remote.log.metadata.topic.name": topic,
            "remote.log.metadata.topic.num.partitions": 4, "remote.log.metadata.consume.wait.ms": 30000,
            "broker.id": 7, "log.dir": str(log_dir or tmp_path / "state"), **extra})
        made.append(m)
        return m

    open_.topic = topic  # type: ignore[attr-defined]
    yield open_
    for m in made:
        m.close()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.delete_topics([topic])[topic].result(60)


def _tp(m: TopicBasedRemoteLogMetadataManager, mp: int, partition: int = 0) -> TopicIdPartition:
    """A user partition that lands on metadata partition ``mp``."""
    while True:
        tp = TopicIdPartition(KafkaUuid.random(), "restart", partition)
        if m.metadata_partition(tp) == mp:
            return tp


def _write_segments(m: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition, first: int, n: int) -> int:
    """Copies ``n`` segments (2 records each), deletes the first one fully (2 more); returns records."""
    mds = []
    for i in range(first, first + n):
        sid = RemoteLogSegmentId.generate_new(tp)
        md = RemoteLogSegmentMetadata(sid, i * 100, i * 100 + 99, 1, 7, 1, 1000, ((i // 3, i * 100),))
        m.add_remote_log_segment_metadata(md)
        m.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2,
                                                                            S.COPY_SEGMENT_FINISHED, 7, b"c"))
        mds.append(md)
    for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        m.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(mds[0].remote_log_segment_id, 3,
                                                                            state, 7))
    return 2 * n + 2


def _state(m: TopicBasedRemoteLogMetadataManager, tps: list[TopicIdPartition]) -> list[object]:
    out: list[object] = []
    for tp in tps:
        out.append(list(m.list_remote_log_segments(tp)))
        out.append([m.highest_offset_for_epoch(tp, e) for e in range(5)])
        out.append([m.remote_log_segment_metadata(tp, e, o) for e in range(5) for o in range(0, 1200, 50)])
    return out


def _reopen(open_rlmm: Opener, tps: list[TopicIdPartition], **kw: Any) -> TopicBasedRemoteLogMetadataManager:
    m = open_rlmm(**kw)
    m.on_partition_leadership_changes(set(tps), set())
    _state(m, tps)  # waits until loaded
    return m


def test_restart_loads_snapshots_and_consumes_only_newer_records(open_rlmm: Opener, tmp_path: Path) -> None:
    m = open_rlmm()
    tps = [_tp(m, 0), _tp(m, 2), _tp(m, 2, partition=1)]
    m.on_partition_leadership_changes(set(tps), set())
    written = {0: _write_segments(m, tps[0], 0, 4), 2: _write_segments(m, tps[1], 0, 3) + _write_segments(
        m, tps[2], 0, 2)}
    before = _state(m, tps)
    m.close()
    state_dir = tmp_path / "state"
    assert read_committed_offsets(state_dir) == {mp: n - 1 for mp, n in written.items()}
    assert snapshot_path(state_dir, 0).exists() and snapshot_path(state_dir, 2).exists()

    m2 = _reopen(open_rlmm, tps)
    assert _state(m2, tps) == before
    assert m2.stats.snapshots_loaded == {0: written[0] - 1, 2: written[2] - 1}
    assert m2.stats.records_consumed == 0 and m2.stats.replays_from_beginning == set()

    # Another instance (own log.dir) writes more; our restart reads just those records.
    other = open_rlmm(log_dir=tmp_path / "other")
    other.on_partition_leadership_changes({tps[0]}, set())
    m2.close()
    extra = _write_segments(other, tps[0], 10, 2)
    expected = _state(other, tps[:1])
    m3 = _reopen(open_rlmm, tps)
    assert m3.stats.snapshots_loaded == {0: written[0] - 1, 2: written[2] - 1}
    assert m3.stats.records_consumed == extra
    assert _state(m3, tps[:1]) == expected
    assert _state(m3, tps[1:]) == before[3:]


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "missing", "offset_mismatch", "offsets_garbage"])
def test_unusable_snapshot_falls_back_to_replay(open_rlmm: Opener, tmp_path: Path, damage: str) -> None:
    m = open_rlmm()
    tps = [_tp(m, 1), _tp(m, 3)]
    m.on_partition_leadership_changes(set(tps), set())
    n1, n3 = _write_segments(m, tps[0], 0, 3), _write_segments(m, tps[1], 0, 2)
    before = _state(m, tps)
    m.close()
    state_dir = tmp_path / "state"
    snap = snapshot_path(state_dir, 1)
    if damage == "corrupt":
        data = bytearray(snap.read_bytes())
        data[len(data) // 2] ^= 0xFF
        snap.write_bytes(bytes(data))
    elif damage == "truncated":
        snap.write_bytes(snap.read_bytes()[:-7])
    elif damage == "missing":
        snap.unlink()
    elif damage == "offset_mismatch":  # as after a crash between the snapshot and the offsets file
        (state_dir / COMMITTED_OFFSETS_FILE).write_text(f"1 {n1 - 3}\n3 {n3 - 1}\n")
    else:
        (state_dir / COMMITTED_OFFSETS_FILE).write_bytes(b"\x00garbage\n")

    m2 = _reopen(open_rlmm, tps)
    assert _state(m2, tps) == before
    if damage == "offsets_garbage":
        assert m2.stats.replays_from_beginning == {1, 3}
        assert m2.stats.records_consumed == n1 + n3
    else:
        assert m2.stats.replays_from_beginning == {1}
        assert m2.stats.snapshots_loaded == {3: n3 - 1}
        assert m2.stats.records_consumed == n1


def test_snapshot_of_a_recreated_topic_is_discarded(open_rlmm: Opener, kafka: KafkaCluster) -> None:
    """The topic was deleted and created again: the snapshot describes records that no longer exist."""
    m = open_rlmm()
    tp = _tp(m, 2)
    m.on_partition_leadership_changes({tp}, set())
    _write_segments(m, tp, 0, 3)
    m.close()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    topic = open_rlmm.topic  # type: ignore[attr-defined]
    admin.delete_topics([topic])[topic].result(60)
    deadline = time.monotonic() + 60
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    m2 = _reopen(open_rlmm, [tp])  # recreates the (empty) topic
    assert list(m2.list_remote_log_segments(tp)) == []
    assert m2.stats.replays_from_beginning == {2}
    _write_segments(m2, tp, 5, 2)
    assert [s.start_offset for s in m2.list_remote_log_segments(tp)] == [600]


def test_stopping_and_regaining_a_partition_rebuilds_it(open_rlmm: Opener) -> None:
    m = open_rlmm()
    tp = _tp(m, 0)
    m.on_partition_leadership_changes({tp}, set())
    n = _write_segments(m, tp, 0, 3)
    before = _state(m, [tp])
    m.on_stopped_partitions({tp})
    with pytest.raises(RemoteLogMetadataError, match="not managed"):
        list(m.list_remote_log_segments(tp))
    deadline = time.monotonic() + 30
    while m.applied_offsets():  # the consumer thread lets go of the metadata partition
        assert time.monotonic() < deadline
        time.sleep(0.05)
    m.on_partition_leadership_changes(set(), {tp})
    assert _state(m, [tp]) == before
    assert m.stats.snapshots_loaded == {0: n - 1}  # written when the partition was unassigned
