"""The topic store's lost-write races, made deterministic by pausing one instance's consumer thread.

A write is validated against this instance's cache, produced, and acknowledged to the caller only
once this instance's consumer has applied the record at the produced offset. Two ways a write can
go astray between validation and application, each reproduced here against the real broker:

* **two writers**: another writer (a broker, a second sidecar) changes the segment after our
  validation but before our record lands; the consumers drop our record as an invalid transition.
  Kafka's manager would return success and silently lose the event; ours raises
  ``InvalidStateTransitionError``, and every replica of the state agrees on the other write.
* **write not read back in time**: the record is acknowledged but our consumer has not applied it
  within ``remote.log.metadata.consume.wait.ms``; the caller gets the retriable
  ``MetadataTimeoutError``, the record appears later, and the caller's retry is an idempotent
  repeat (no duplicate segment, no rejected event).

The seam: :class:`ConsumerGate` wraps the consumer thread's record handler, so records polled
while the gate is closed wait (in order) until it opens; nothing else about the manager changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Message

from rlm.errors import InvalidStateTransitionError, MetadataTimeoutError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.topic import TopicBasedRemoteLogMetadataManager
from tests.rlmm_topic.helpers import store_config, ten_offset_segment
from tests.services.kafka import KafkaCluster

pytestmark = pytest.mark.kafka

S = RemoteLogSegmentState
_WAIT_S = 60.0  # bounds every wait on a condition; reached only when the test fails
SHORT_WAIT_MS = 4000


class ConsumerGate:
    """Holds back the records a manager's consumer thread polls until :meth:`release`."""

    def __init__(self, manager: TopicBasedRemoteLogMetadataManager) -> None:
        consumer = manager._consumer
        assert consumer is not None
        self._handle: Callable[[list[Message]], None] = consumer._handle
        self._open = threading.Event()
        self._open.set()
        self.holding = threading.Event()  # set once a batch is being held back
        consumer._handle = self._gated  # type: ignore[method-assign]

    def _gated(self, msgs: list[Message]) -> None:
        if not self._open.is_set():
            self.holding.set()
            assert self._open.wait(_WAIT_S), "the gate was never released"
        self._handle(msgs)

    def close(self) -> None:
        self._open.clear()
        self.holding.clear()

    def release(self) -> None:
        self._open.set()


def _states(
    m: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition
) -> list[tuple[RemoteLogSegmentId, S]]:
    return [(s.remote_log_segment_id, s.state) for s in m.list_remote_log_segments(tp)]


def _update(md: RemoteLogSegmentMetadata, state: S, broker: int) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, state, broker)


def test_write_overtaken_by_another_writer_is_a_typed_error_not_a_lost_event(
    kafka: KafkaCluster, metadata_topic: str, tmp_path: Path
) -> None:
    """Writer A validates COPY_SEGMENT_FINISHED against a cache that has not yet seen writer B's
    DELETE_SEGMENT_STARTED; A's record lands after B's and is dropped as invalid by every consumer,
    so A gets InvalidStateTransitionError, and A, B and a fresh replay all hold B's state."""
    tp = TopicIdPartition(KafkaUuid.random(), "raced", 0)
    a = TopicBasedRemoteLogMetadataManager(
        store_config(kafka.bootstrap, metadata_topic, tmp_path / "a", broker_id=1)
    )
    b = TopicBasedRemoteLogMetadataManager(
        store_config(kafka.bootstrap, metadata_topic, tmp_path / "b", broker_id=2)
    )
    gate = ConsumerGate(a)
    try:
        for m in (a, b):
            m.on_partition_leadership_changes({tp}, set())
        seg = ten_offset_segment(tp, 0, 1)
        a.add_remote_log_segment_metadata(seg)
        b.on_partition_leadership_changes(set(), {tp})  # a new follower->leader round trip: B catches up
        b.on_partition_leadership_changes({tp}, set())
        assert _states(b, tp) == [(seg.remote_log_segment_id, S.COPY_SEGMENT_STARTED)]

        gate.close()  # A's consumer stops applying: A's cache is now stale
        b.update_remote_log_segment_metadata(_update(seg, S.DELETE_SEGMENT_STARTED, 2))
        assert gate.holding.wait(_WAIT_S), "A's consumer never polled B's record"
        assert _states(a, tp) == [(seg.remote_log_segment_id, S.COPY_SEGMENT_STARTED)]  # stale view

        outcome: list[BaseException | None] = []
        finish = _update(seg, S.COPY_SEGMENT_FINISHED, 1)

        def write_a() -> None:
            try:
                a.update_remote_log_segment_metadata(finish)
                outcome.append(None)
            except BaseException as e:
                outcome.append(e)

        published = threading.Event()
        publisher = a._publisher
        assert publisher is not None
        publish = publisher.publish

        def publish_and_signal(partition: int, value: bytes, deadline: float) -> int:
            offset = publish(partition, value, deadline)
            published.set()
            return offset

        publisher.publish = publish_and_signal  # type: ignore[method-assign]
        writer = threading.Thread(target=write_a, name="writer-a")
        writer.start()
        assert published.wait(_WAIT_S), "A's write never reached the topic"  # validated on the stale view
        gate.release()
        writer.join(_WAIT_S)
        assert not writer.is_alive()

        assert len(outcome) == 1 and isinstance(outcome[0], InvalidStateTransitionError), outcome
        assert "another writer" in str(outcome[0])
        want = [(seg.remote_log_segment_id, S.DELETE_SEGMENT_STARTED)]
        assert _states(a, tp) == want
        assert a.stats.records_rejected == 1
        # B applies A's late record too and drops it the same way: one state everywhere.
        b.on_partition_leadership_changes(set(), {tp})
        b.on_partition_leadership_changes({tp}, set())
        assert _states(b, tp) == want
        assert b.stats.records_rejected == 1
        # A retrying with the same event now fails before writing anything.
        with pytest.raises(InvalidStateTransitionError):
            a.update_remote_log_segment_metadata(finish)
        assert a.applied_offsets() == b.applied_offsets() == {0: 2}
    finally:
        gate.release()
        a.close()
        b.close()
    with TopicBasedRemoteLogMetadataManager(
        store_config(kafka.bootstrap, metadata_topic, tmp_path / "fresh", broker_id=3)
    ) as fresh:
        fresh.on_partition_leadership_changes(set(), {tp})
        assert _states(fresh, tp) == want
        assert fresh.stats.records_rejected == 1


def test_write_read_back_late_times_out_then_retry_is_idempotent(
    kafka: KafkaCluster, metadata_topic: str, tmp_path: Path
) -> None:
    """The consumer is held so an acknowledged COPY_SEGMENT_FINISHED is not applied in time: the caller
    gets a retriable MetadataTimeoutError, the record is applied once released, and the caller's retry
    neither fails nor duplicates the segment (here and in a fresh replay)."""
    tp = TopicIdPartition(KafkaUuid.random(), "late", 0)
    cfg = store_config(kafka.bootstrap, metadata_topic, tmp_path / "a", broker_id=1)
    a = TopicBasedRemoteLogMetadataManager(cfg)
    gate = ConsumerGate(a)
    try:
        a.on_partition_leadership_changes({tp}, set())
        seg = ten_offset_segment(tp, 0, 1)
        a.add_remote_log_segment_metadata(seg)
        finish = _update(seg, S.COPY_SEGMENT_FINISHED, 1)

        gate.close()
        # Only this write gets a short wait (long enough for the broker's acknowledgement on a busy
        # machine; the read-back cannot happen while the gate is closed), the rest 30 s.
        long_wait = a._cfg
        assert long_wait is not None
        a._cfg = long_wait.model_copy(update={"consume_wait_ms": SHORT_WAIT_MS})
        try:
            with pytest.raises(MetadataTimeoutError, match="written but not read back") as e:
                a.update_remote_log_segment_metadata(finish)
        finally:
            a._cfg = long_wait
        assert e.value.retriable
        assert gate.holding.wait(_WAIT_S)  # the record is in the topic, held before A's cache
        assert _states(a, tp) == [(seg.remote_log_segment_id, S.COPY_SEGMENT_STARTED)]

        gate.release()
        a.update_remote_log_segment_metadata(finish)  # the caller's retry: validated, written again
        assert _states(a, tp) == [(seg.remote_log_segment_id, S.COPY_SEGMENT_FINISHED)]
        assert a.stats.records_rejected == 0 and a.stats.records_applied == 3  # add + finish twice
        seg2 = ten_offset_segment(tp, 10, 1)
        a.add_remote_log_segment_metadata(seg2)
        state = _states(a, tp)
        assert state == [
            (seg.remote_log_segment_id, S.COPY_SEGMENT_FINISHED),
            (seg2.remote_log_segment_id, S.COPY_SEGMENT_STARTED),
        ]
    finally:
        gate.release()
        a.close()
    with TopicBasedRemoteLogMetadataManager({**cfg, "log.dir": str(tmp_path / "fresh")}) as fresh:
        fresh.on_partition_leadership_changes(set(), {tp})
        assert _states(fresh, tp) == state
