"""Remote data of deleted partitions: DELETE_PARTITION_MARKED → STARTED → delete segments → FINISHED.

The service marks a partition when its topic is gone from the cluster (or, standalone, when the
broker renamed its directory to ``*-delete``). The remover runs every
``remote.partition.remover.task.interval.ms`` (and right after a partition is marked) and
resumes unfinished work after a restart from the metadata manager's recorded state.
"""

from __future__ import annotations

import threading

import structlog

from rlm.daemon.context import TaskContext, now_ms
from rlm.daemon.log_start import LogStartKeeper
from rlm.daemon.remote_ops import delete_remote_segment
from rlm.types import (
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

log = structlog.get_logger(__name__)
P = RemotePartitionDeleteState


class PartitionRemover:
    """Holds the partitions awaiting removal; ``run_once`` works through them."""

    def __init__(self, ctx: TaskContext) -> None:
        self.ctx = ctx
        self._pending: set[TopicIdPartition] = set()
        self._lock = threading.Lock()
        self.wakeup = threading.Event()

    def mark(self, tp: TopicIdPartition) -> None:
        """Record DELETE_PARTITION_MARKED (unless already further along) and queue the partition."""
        state = self.ctx.rlmm.remote_partition_delete_state(tp)
        if state is None:
            self._put(tp, P.DELETE_PARTITION_MARKED)
            log.info("partition_delete_marked", topic=tp.topic, partition=tp.partition)
        if state is not P.DELETE_PARTITION_FINISHED:
            with self._lock:
                self._pending.add(tp)
            self.wakeup.set()

    def pending(self) -> set[TopicIdPartition]:
        with self._lock:
            return set(self._pending)

    def _put(self, tp: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        self.ctx.meta(
            self.ctx.rlmm.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(tp, state, now_ms(), self.ctx.node_id)
            )
        )

    def run_once(self) -> int:
        """Remove every pending partition; returns how many finished. Errors leave it pending."""
        done = 0
        for tp in sorted(self.pending()):
            if self.ctx.stop.is_set():
                break
            try:
                self.remove(tp)
                done += 1
                with self._lock:
                    self._pending.discard(tp)
            except Exception as e:
                self.ctx.metrics.error(e, "partition_remover")
                log.warning(
                    "partition_remove_failed",
                    topic=tp.topic,
                    partition=tp.partition,
                    error=str(e),
                    kind=type(e).__name__,
                )
        return done

    def remove(self, tp: TopicIdPartition) -> None:
        state = self.ctx.rlmm.remote_partition_delete_state(tp)
        if state is P.DELETE_PARTITION_FINISHED:
            return
        if state is None:
            self._put(tp, P.DELETE_PARTITION_MARKED)
        self._put(tp, P.DELETE_PARTITION_STARTED)
        n = 0
        for md in list(self.ctx.rlmm.list_remote_log_segments(tp)):
            if md.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                continue
            delete_remote_segment(self.ctx, md, "partition_deleted")
            n += 1
        LogStartKeeper(self.ctx).forget(tp)  # the published log start offset goes with the segments
        self._put(tp, P.DELETE_PARTITION_FINISHED)
        log.info("partition_delete_finished", topic=tp.topic, partition=tp.partition, segments=n)
