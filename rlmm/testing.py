"""Contract suite every RemoteLogMetadataManager must pass (pytest).

Use it like fsspec's abstract tests: subclass :class:`RemoteLogMetadataManagerContract` in a
test module and provide a fixture ``rlmm_factory`` returning a callable; each call returns a
started manager on the *same* durable state (a directory, a Kafka cluster), so calling it again
after ``close()`` is a restart. The fixture should close whatever it handed out at teardown
(``close`` is idempotent). Every test works on fresh random topic ids, so a shared broker is
fine.

Covered: every valid and invalid segment transition (an invalid one is a typed error and
changes nothing), partition deletion states, lookups across leader epochs with Kafka's exact
semantics, per-epoch listing and sizes, restart recovery, concurrent writers, and the five
leader-epoch scenarios of KIP-405 (new follower, follower catching up, multiple hard failures,
unclean election with truncation, divergence in remote storage).
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable

import pytest

from rlm.errors import InvalidStateTransitionError, RemoteLogMetadataError, RemoteLogSegmentNotFoundError
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
from rlmm.api import RemoteLogMetadataManager

Factory = Callable[[], RemoteLogMetadataManager]
S = RemoteLogSegmentState
P = RemotePartitionDeleteState
_PATH_TO: dict[S, tuple[S, ...]] = {
    S.COPY_SEGMENT_STARTED: (),
    S.COPY_SEGMENT_FINISHED: (S.COPY_SEGMENT_FINISHED,),
    S.DELETE_SEGMENT_STARTED: (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    S.DELETE_SEGMENT_FINISHED: (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
}
_VALID = {(a, b) for a in S for b in S if a is b} | {
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)}


def new_tp(partition: int = 0) -> TopicIdPartition:
    return TopicIdPartition(KafkaUuid.random(), f"contract-{uuid.uuid4().hex[:8]}", partition)


def seg(tp: TopicIdPartition, start: int, end: int, epochs: dict[int, int], size: int = 1000,
        broker: int = 0) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), start, end, 1_700_000_000_000 + end,
                                    broker, 1_700_000_000_000, size, tuple(epochs.items()))


def upd(md: RemoteLogSegmentMetadata, state: S, custom: bytes | None = None,
        broker: int = 0) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 1_700_000_100_000, state, broker, custom)


def ids(it: object) -> list[KafkaUuid]:
    return [m.remote_log_segment_id.id for m in it]  # type: ignore[attr-defined]


def started(factory: Factory, *tps: TopicIdPartition) -> RemoteLogMetadataManager:
    m = factory()
    m.on_partition_leadership_changes(set(tps), set())
    return m


def copied(m: RemoteLogMetadataManager, *mds: RemoteLogSegmentMetadata) -> None:
    """Adds then finishes each segment, in order (what a leader's copy task does)."""
    for md in mds:
        m.add_remote_log_segment_metadata(md)
        m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))


def state_of(m: RemoteLogMetadataManager, md: RemoteLogSegmentMetadata) -> S | None:
    for x in m.list_remote_log_segments(md.topic_id_partition):
        if x.remote_log_segment_id == md.remote_log_segment_id:
            return x.state
    return None


def lookup(m: RemoteLogMetadataManager, tp: TopicIdPartition, epoch: int, offset: int) -> KafkaUuid | None:
    found = m.remote_log_segment_metadata(tp, epoch, offset)
    return found.remote_log_segment_id.id if found is not None else None


class RemoteLogMetadataManagerContract:
    """Behaviour shared by every implementation; needs the ``rlmm_factory`` fixture."""

    # ---- segment lifecycle ---------------------------------------------------------------------
    def test_copy_started_is_listed_but_not_readable(self, rlmm_factory: Factory) -> None:
        tp = new_tp()
        m = started(rlmm_factory, tp)
        md = seg(tp, 0, 99, {0: 0})
        m.add_remote_log_segment_metadata(md)
        assert ids(m.list_remote_log_segments(tp)) == [md.remote_log_segment_id.id]
        assert ids(m.list_remote_log_segments(tp, 0)) == [md.remote_log_segment_id.id]
        assert m.remote_log_segment_metadata(tp, 0, 50) is None
        assert m.highest_offset_for_epoch(tp, 0) is None
        m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED, custom=b"crc:1234"))
        got = m.remote_log_segment_metadata(tp, 0, 50)
        assert got is not None and got.state is S.COPY_SEGMENT_FINISHED
        assert (got.start_offset, got.end_offset, got.segment_leader_epochs) == (0, 99, ((0, 0),))
        assert got.custom_metadata == b"crc:1234" and got.segment_size_in_bytes == 1000
        assert m.highest_offset_for_epoch(tp, 0) == 99
        assert m.remote_log_segment_metadata(tp, 0, 100) is None
        assert m.remote_log_segment_metadata(tp, 1, 50) is None

    @pytest.mark.parametrize("state", [s for s in S if s is not S.COPY_SEGMENT_STARTED])
    def test_add_requires_copy_segment_started(self, rlmm_factory: Factory, state: S) -> None:
        tp = new_tp()
        m = started(rlmm_factory, tp)
        md = seg(tp, 0, 9, {0: 0})
        bad = RemoteLogSegmentMetadata(md.remote_log_segment_id, 0, 9, 1, 0, 1, 10, ((0, 0),), state)
        with pytest.raises(InvalidStateTransitionError):
            m.add_remote_log_segment_metadata(bad)
        assert list(m.list_remote_log_segments(tp)) == []

    def test_update_of_unknown_segment_is_not_found(self, rlmm_factory: Factory) -> None:
        tp = new_tp()
        m = started(rlmm_factory, tp)
        with pytest.raises(RemoteLogSegmentNotFoundError):
            m.update_remote_log_segment_metadata(upd(seg(tp, 0, 9, {0: 0}), S.COPY_SEGMENT_FINISHED))
        assert list(m.list_remote_log_segments(tp)) == []

    def test_update_cannot_set_copy_segment_started(self, rlmm_factory: Factory) -> None:
        tp = new_tp()
        m = started(rlmm_factory, tp)
        md = seg(tp, 0, 9, {0: 0})
        m.add_remote_log_segment_metadata(md)
        with pytest.raises(InvalidStateTransitionError):
            m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_STARTED))
        assert state_of(m, md) is S.COPY_SEGMENT_STARTED

    @pytest.mark.parametrize(("src", "target"), list(itertools.product(S, S)),
                             ids=lambda s: s.name if isinstance(s, S) else str(s))
    def test_segment_state_transitions(self, rlmm_factory: Factory, src: S, target: S) -> None:
        tp = new_tp()
        m = started(rlmm_factory, tp)
        md = seg(tp, 0, 9, {0: 0})
        m.add_remote_log_segment_metadata(md)
        for step in _PATH_TO[src]:
            m.update_remote_log_segment_metadata(upd(md, step))
        before = list(m.list_remote_log_segments(tp))
        if target is S.COPY_SEGMENT_STARTED:
            # an idempotent re-add, or the id of a forgotten (fully deleted) segment, as in Kafka
            expected_ok = src in (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)
            call: Callable[[], None] = lambda: m.add_remote_log_segment_metadata(md)  # noqa: E731
        else:
            expected_ok = (src, target) in _VALID
            call = lambda: m.update_remote_log_segment_metadata(upd(md, target))  # noqa: E731
        if src is S.DELETE_SEGMENT_FINISHED and target is not S.COPY_SEGMENT_STARTED:
            with pytest.raises(RemoteLogSegmentNotFoundError):  # the segment is forgotten
                call()
            assert list(m.list_remote_log_segments(tp)) == before
            return
        if expected_ok:
            call()
            expected = None if target is S.DELETE_SEGMENT_FINISHED else target
            assert state_of(m, md) is expected
        else:
            with pytest.raises(InvalidStateTransitionError):
                call()
            assert list(m.list_remote_log_segments(tp)) == before

    def test_delete_started_hides_from_reads_but_keeps_listing(self, rlmm_factory: Factory) -> None:
        tp = new_tp()
        m = started(rlmm_factory, tp)
        a, b = seg(tp, 0, 99, {0: 0}, size=100), seg(tp, 100, 199, {0: 100}, size=200)
        copied(m, a, b)
        assert m.remote_log_size(tp, 0) == 300
        m.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_STARTED))
        assert m.remote_log_segment_metadata(tp, 0, 10) is None
        assert lookup(m, tp, 0, 150) == b.remote_log_segment_id.id
        assert ids(m.list_remote_log_segments(tp, 0)) == ids([a, b])
        assert m.remote_log_size(tp, 0) == 300
        m.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_FINISHED))
        assert ids(m.list_remote_log_segments(tp)) == ids([b])
        assert ids(m.list_remote_log_segments(tp, 0)) == ids([b])
        assert m.remote_log_size(tp, 0) == 200
        assert m.highest_offset_for_epoch(tp, 0) == 199  # Kafka never lowers it

    def test_lookup_respects_epoch_ranges_inside_a_segment(self, rlmm_factory: Factory) -> None:
        tp = new_tp()
        m = started(rlmm_factory, tp)
        a = seg(tp, 0, 99, {0: 0, 1: 50})
        b = seg(tp, 100, 199, {1: 100, 3: 180})
        copied(m, a, b)
        a_id, b_id = a.remote_log_segment_id.id, b.remote_log_segment_id.id
        assert [lookup(m, tp, 0, o) for o in (0, 49, 50, 120)] == [a_id, a_id, None, None]
        assert [lookup(m, tp, 1, o) for o in (49, 50, 99, 100, 179, 180)] == [
            None, a_id, a_id, b_id, b_id, None]
        assert [lookup(m, tp, 3, o) for o in (179, 180, 199, 200)] == [None, b_id, b_id, None]
        assert lookup(m, tp, 2, 150) is None
        assert [m.highest_offset_for_epoch(tp, e) for e in range(5)] == [49, 179, None, 199, None]
        assert ids(m.list_remote_log_segments(tp, 1)) == [a_id, b_id]
        assert ids(m.list_remote_log_segments(tp, 2)) == []
        assert [m.remote_log_size(tp, e) for e in range(4)] == [1000, 2000, 0, 1000]

    def test_newer_overlapping_upload_wins(self, rlmm_factory: Factory) -> None:
        """Kafka's two cases: a duplicate (0-100 then 0-200) and an overlap (10-90 then 5-100)."""
        tp = new_tp()
        m = started(rlmm_factory, tp)
        s0, s1 = seg(tp, 0, 100, {0: 0}), seg(tp, 0, 200, {0: 0})
        copied(m, s0, s1)
        assert lookup(m, tp, 0, 50) == s1.remote_log_segment_id.id
        # Kafka lists the epoch's mapped ids, then its unreferenced ones, stable-sorted by start offset
        assert ids(m.list_remote_log_segments(tp, 0)) == ids([s1, s0])
        tp2 = new_tp()
        m.on_partition_leadership_changes({tp2}, set())
        o0, o1, o2 = seg(tp2, 10, 90, {0: 10}), seg(tp2, 5, 100, {0: 5}), seg(tp2, 101, 200, {0: 101})
        copied(m, o0, o1, o2)
        assert lookup(m, tp2, 0, 95) == o1.remote_log_segment_id.id
        assert lookup(m, tp2, 0, 50) == o1.remote_log_segment_id.id
        assert lookup(m, tp2, 0, 150) == o2.remote_log_segment_id.id

    # ---- partitions --------------------------------------------------------------------------------
    def test_partition_delete_states(self, rlmm_factory: Factory) -> None:
        tp = new_tp()
        m = started(rlmm_factory, tp)
        copied(m, seg(tp, 0, 9, {0: 0}))

        def put(state: P) -> None:
            m.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(tp, state, 1, 0))

        assert m.remote_partition_delete_state(tp) is None
        for bad in (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED):
            with pytest.raises(InvalidStateTransitionError):
                put(bad)
        put(P.DELETE_PARTITION_MARKED)
        put(P.DELETE_PARTITION_MARKED)  # same state again: valid
        with pytest.raises(InvalidStateTransitionError):
            put(P.DELETE_PARTITION_FINISHED)
        put(P.DELETE_PARTITION_STARTED)
        assert m.remote_partition_delete_state(tp) is P.DELETE_PARTITION_STARTED
        assert len(list(m.list_remote_log_segments(tp))) == 1
        with pytest.raises(InvalidStateTransitionError):
            put(P.DELETE_PARTITION_MARKED)
        put(P.DELETE_PARTITION_FINISHED)
        assert m.remote_partition_delete_state(tp) is P.DELETE_PARTITION_FINISHED
        assert list(m.list_remote_log_segments(tp)) == []

    def test_restart_recovers_every_state(self, rlmm_factory: Factory) -> None:
        tp, tp2 = new_tp(0), new_tp(1)
        m = started(rlmm_factory, tp, tp2)
        a, b, c, d = (seg(tp, 0, 99, {0: 0}), seg(tp, 100, 199, {0: 100, 1: 150}),
                      seg(tp, 200, 299, {1: 200}), seg(tp, 300, 399, {1: 300}))
        copied(m, a, b, c)
        m.add_remote_log_segment_metadata(d)
        m.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_STARTED))
        m.update_remote_log_segment_metadata(upd(b, S.COPY_SEGMENT_FINISHED, custom=b"\x00\xff"))
        m.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(tp2, P.DELETE_PARTITION_MARKED, 5, 1))

        def observe(x: RemoteLogMetadataManager) -> tuple[object, ...]:
            return (list(x.list_remote_log_segments(tp)),
                    [list(x.list_remote_log_segments(tp, e)) for e in (0, 1)],
                    [lookup(x, tp, e, o) for e in (0, 1) for o in range(0, 400, 25)],
                    [x.highest_offset_for_epoch(tp, e) for e in (0, 1, 2)], x.remote_log_size(tp, 1))

        before = observe(m)
        m.close()
        m2 = started(rlmm_factory, tp, tp2)
        assert observe(m2) == before
        assert m2.remote_partition_delete_state(tp2) is P.DELETE_PARTITION_MARKED
        with pytest.raises(InvalidStateTransitionError):  # validation uses the recovered state
            m2.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_FINISHED))
        m2.update_remote_log_segment_metadata(upd(d, S.COPY_SEGMENT_FINISHED))
        assert lookup(m2, tp, 1, 350) == d.remote_log_segment_id.id

    def test_concurrent_writers(self, rlmm_factory: Factory) -> None:
        tps = [new_tp(i) for i in range(4)]
        m = started(rlmm_factory, *tps)
        errors: list[BaseException] = []

        def work(tp: TopicIdPartition) -> None:
            try:
                copied(m, *(seg(tp, i * 10, i * 10 + 9, {0: i * 10}) for i in range(5)))
            except BaseException as e:  # collected and re-raised in the test thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(tp,)) for tp in tps]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for tp in tps:
            assert [x.start_offset for x in m.list_remote_log_segments(tp)] == [0, 10, 20, 30, 40]
            assert m.highest_offset_for_epoch(tp, 0) == 49

    def test_closed_manager_rejects_calls(self, rlmm_factory: Factory) -> None:
        tp = new_tp()
        m = started(rlmm_factory, tp)
        m.close()
        m.close()
        with pytest.raises(RemoteLogMetadataError):
            m.add_remote_log_segment_metadata(seg(tp, 0, 9, {0: 0}))

    # ---- KIP-405 leader epoch scenarios ---------------------------------------------------------------
    def test_kip405_new_empty_follower(self, rlmm_factory: Factory) -> None:
        """Leader lineage (0,0) (1,100) (2,250); local log starts at 300. A new follower asks for the
        segment holding local-log-start - 1 under the epoch of that offset, then its epoch entries."""
        tp = new_tp()
        m = started(rlmm_factory, tp)
        s1, s2, s3 = seg(tp, 0, 99, {0: 0}), seg(tp, 100, 199, {1: 100}), seg(tp, 200, 299, {1: 200, 2: 250})
        copied(m, s1, s2, s3)
        m.close()
        follower = rlmm_factory()  # restarted, this time only following the partition
        follower.on_partition_leadership_changes(set(), {tp})
        found = follower.remote_log_segment_metadata(tp, 2, 299)
        assert found is not None and found.remote_log_segment_id == s3.remote_log_segment_id
        assert found.segment_leader_epochs == ((1, 200), (2, 250))
        assert [follower.highest_offset_for_epoch(tp, e) for e in (0, 1, 2)] == [99, 249, 299]
        assert lookup(follower, tp, 0, 0) == s1.remote_log_segment_id.id

    def test_kip405_follower_catching_up(self, rlmm_factory: Factory) -> None:
        """Follower has (0,0) (1,100) up to 180; leader has (0,0) (1,100) (2,150): the follower truncates
        to 150 and continues from remote under epoch 2; its stale epoch-1 offsets >= 150 are not served."""
        tp = new_tp()
        m = started(rlmm_factory, tp)
        s1, s2 = seg(tp, 0, 99, {0: 0}), seg(tp, 100, 199, {1: 100, 2: 150})
        copied(m, s1, s2)
        assert m.highest_offset_for_epoch(tp, 1) == 149
        assert lookup(m, tp, 1, 149) == s2.remote_log_segment_id.id
        assert lookup(m, tp, 1, 160) is None
        assert lookup(m, tp, 2, 150) == s2.remote_log_segment_id.id

    def test_kip405_multiple_hard_failures(self, rlmm_factory: Factory) -> None:
        """A (epoch 0) copies 0-99 and dies; B (epoch 1) starts copying 100-199 and dies mid-copy;
        A comes back (epoch 2), finds 99 as the highest copied offset and re-uploads 100-199."""
        tp = new_tp()
        m = started(rlmm_factory, tp)
        s1 = seg(tp, 0, 99, {0: 0}, broker=1)
        copied(m, s1)
        assert [m.highest_offset_for_epoch(tp, e) for e in (1, 0)] == [None, 99]
        dangling = seg(tp, 100, 199, {0: 100, 1: 150}, broker=2)
        m.add_remote_log_segment_metadata(dangling)
        m.close()
        m = started(rlmm_factory, tp)
        assert [m.highest_offset_for_epoch(tp, e) for e in (2, 1, 0)] == [None, None, 99]
        again = seg(tp, 100, 199, {0: 100, 1: 150}, broker=1)
        copied(m, again)
        assert lookup(m, tp, 1, 170) == again.remote_log_segment_id.id
        assert lookup(m, tp, 0, 120) == again.remote_log_segment_id.id
        assert set(ids(m.list_remote_log_segments(tp, 1))) == {dangling.remote_log_segment_id.id,
                                                                  again.remote_log_segment_id.id}
        assert m.remote_log_size(tp, 1) == 2000
        m.update_remote_log_segment_metadata(upd(dangling, S.DELETE_SEGMENT_STARTED))
        m.update_remote_log_segment_metadata(upd(dangling, S.DELETE_SEGMENT_FINISHED))
        assert ids(m.list_remote_log_segments(tp)) == ids([s1, again])

    def test_kip405_unclean_election_with_truncation(self, rlmm_factory: Factory) -> None:
        """A (epoch 0) tiered 0-99 and 100-199; out-of-sync B had only up to 149 and is elected
        uncleanly (epoch 1 from 150). B's copy 100-249 {0:100, 1:150} replaces 100-199 for epoch 0."""
        tp = new_tp()
        m = started(rlmm_factory, tp)
        s1, s2 = seg(tp, 0, 99, {0: 0}), seg(tp, 100, 199, {0: 100})
        copied(m, s1, s2)
        s3 = seg(tp, 100, 249, {0: 100, 1: 150})
        copied(m, s3)
        s3_id = s3.remote_log_segment_id.id
        assert lookup(m, tp, 0, 120) == s3_id
        assert lookup(m, tp, 0, 170) is None  # offset 170 under epoch 0 only exists on the lost lineage
        assert lookup(m, tp, 1, 170) == s3_id
        assert m.highest_offset_for_epoch(tp, 0) == 199 and m.highest_offset_for_epoch(tp, 1) == 249
        assert ids(m.list_remote_log_segments(tp, 0)) == ids([s1, s3])  # Kafka drops the replaced id
        assert ids(m.list_remote_log_segments(tp)) == ids([s1, s2, s3])

    @pytest.mark.parametrize("zombie_last", [False, True])
    def test_kip405_divergence_in_remote(self, rlmm_factory: Factory, zombie_last: bool) -> None:
        """Zombie leader A (epoch 1) uploads 200-299 {1:200} while new leader B (epoch 2 from 250)
        uploads 200-349 {1:200, 2:250}. Reads use the reader's epoch for the offset, so the current
        lineage is served whichever upload finished last."""
        tp = new_tp()
        m = started(rlmm_factory, tp)
        base = seg(tp, 0, 199, {1: 0})
        copied(m, base)
        zombie, leader = seg(tp, 200, 299, {1: 200}), seg(tp, 200, 349, {1: 200, 2: 250})
        copied(m, *((leader, zombie) if zombie_last else (zombie, leader)))
        leader_id, zombie_id = leader.remote_log_segment_id.id, zombie.remote_log_segment_id.id
        assert lookup(m, tp, 2, 270) == leader_id
        assert lookup(m, tp, 2, 349) == leader_id
        assert lookup(m, tp, 1, 220) == (zombie_id if zombie_last else leader_id)
        assert lookup(m, tp, 1, 270) == (zombie_id if zombie_last else None)
        assert m.highest_offset_for_epoch(tp, 1) == 299
        assert set(ids(m.list_remote_log_segments(tp))) == {
            base.remote_log_segment_id.id, leader_id, zombie_id}
