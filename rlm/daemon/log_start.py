"""The log start offset on the leader's side: learn it, publish it to readers, delete below it.

Kafka bounds every read by the partition's log start offset and its RemoteLogManager deletes
remote segments that lie wholly below it (the log-start breach). This sidecar's broker does not
know about tiering, so the daemon — which runs beside the leader and sees its log dir — learns
the ``DeleteRecords`` bound from the broker (ListOffsets EARLIEST, fresh) and the log dir's
``log-start-offset-checkpoint`` (rewritten every minute), keeping only what local retention
cannot explain (:func:`rlm.log.log_start.deletion_bound`). It then:

1. publishes it beside the segments (:mod:`rsm_plugins.log_start`) when it grew, so a reader with
   neither log dir nor broker honours it too (and keeps honouring it after the broker's own
   retention has forgotten it: once local retention passes the bound, the broker's log start is
   a segment base again and the checkpoint entry disappears);
2. deletes the lineage segments wholly below it (DELETE_SEGMENT_STARTED → RSM delete →
   DELETE_SEGMENT_FINISHED, reason ``log_start``), before remote retention runs, as Kafka does.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import structlog

from rlm.daemon.context import TaskContext, now_ms
from rlm.daemon.local_log import LocalLogView
from rlm.daemon.remote_ops import delete_remote_segment
from rlm.daemon.workdir import atomic_write
from rlm.errors import LogFormatError, RemoteStorageIntegrityError
from rlm.log.log_start import checkpoint_log_start, deletion_bound, first_segment_offset
from rlm.secrets import reveal_all
from rlm.types import RemoteLogSegmentMetadata, TopicIdPartition, TopicPartition, check_topic_name
from rsm_plugins import log_start as log_start_object

log = structlog.get_logger(__name__)

#: How often the published object is read back (a lost or corrupt one is then written again).
RECHECK_S = 600.0


class LogStartKeeper:
    """Per daemon: the bound each led partition published, and a lazily made admin client."""

    def __init__(self, ctx: TaskContext) -> None:
        self.ctx = ctx
        self._published: dict[TopicIdPartition, tuple[int, float]] = {}  # bound, monotonic s checked
        self._admin: Any = None
        self._lock = threading.Lock()

    def enforce(
        self, tp: TopicIdPartition, view: LocalLogView, finished: list[RemoteLogSegmentMetadata]
    ) -> int:
        """Learn and publish ``tp``'s bound, then delete the segments of ``finished`` (lineage
        segments, oldest first) wholly below it; they are removed from ``finished``. Returns the
        number deleted."""
        bound = self.learn(tp, view, finished)
        st = self.ctx.status.partition(tp.topic, tp.partition)
        st.log_start = bound
        deleted = 0
        for md in [m for m in finished if bound > m.end_offset]:
            if self.ctx.stop.is_set():
                break
            delete_remote_segment(self.ctx, md, "log_start")
            finished.remove(md)
            deleted += 1
        return deleted

    def learn(
        self, tp: TopicIdPartition, view: LocalLogView, finished: list[RemoteLogSegmentMetadata]
    ) -> int:
        """The partition's bound (-1: none known), published when it grew."""
        remote = [(m.start_offset, m.end_offset) for m in finished]
        ktp = TopicPartition(tp.topic, tp.partition)
        broker = self._broker_earliest(ktp)
        try:
            entry = checkpoint_log_start(view.dir.parent, ktp)
        except LogFormatError as e:
            log.warning("log_start_checkpoint_unreadable", topic=tp.topic, partition=tp.partition,
                        error=str(e))
            entry = None
        first = first_segment_offset(view.dir)  # listed after both answers: see deletion_bound
        candidates = (deletion_bound(broker, remote, first), deletion_bound(entry, remote, first))
        found = max((v for v in candidates if v is not None), default=-1)
        stored, rewrite = self._stored(tp)
        bound = max(found, stored)
        if bound >= 0 and (bound > stored or rewrite):
            self._save_local(tp, bound)
            if self.ctx.rsm.write_log_start_offset(tp, bound):
                log.info("log_start_published", topic=tp.topic, partition=tp.partition,
                         log_start_offset=bound, previous=stored, broker=broker, checkpoint=entry,
                         local_start=first)
            self._published[tp] = (bound, time.monotonic())
        return bound

    def _stored(self, tp: TopicIdPartition) -> tuple[int, bool]:
        """(highest bound known: published or remembered in the work dir, or -1; whether the
        published object must be written: it is missing, behind or corrupt)."""
        known = self._published.get(tp)
        if known is not None and time.monotonic() - known[1] < RECHECK_S:
            return known[0], False
        local = self._load_local(tp)
        try:
            got = self.ctx.rsm.read_log_start_offset(tp)
        except RemoteStorageIntegrityError as e:
            log.error("log_start_object_corrupt", topic=tp.topic, partition=tp.partition, error=str(e),
                      remembered=local)
            return local, True
        stored = -1 if got is None else got
        value = max(local, stored, -1 if known is None else known[0])
        if value == stored:
            self._published[tp] = (value, time.monotonic())
            return value, False
        return value, True  # this daemon knows more than storage (object lost or behind): publish again

    # The work dir keeps its own copy: the published object is the only other memory of a bound
    # once local retention passed it (the broker then forgets it), so a lost or corrupt object
    # must be rewritable by the leader that published it.
    def _local_path(self, tp: TopicIdPartition) -> Path:
        name = f"{check_topic_name(tp.topic)}-{tp.partition}-{tp.topic_id.text}.json"
        return self.ctx.work_dir / "log-start" / name

    def forget(self, tp: TopicIdPartition) -> None:
        """The partition was deleted: drop the published object and the work dir's copy."""
        self.ctx.rsm.delete_log_start_offset(tp)
        self._local_path(tp).unlink(missing_ok=True)
        self._published.pop(tp, None)

    def _load_local(self, tp: TopicIdPartition) -> int:
        path = self._local_path(tp)
        try:
            return log_start_object.decode(tp, path.read_bytes(), str(path))
        except FileNotFoundError:
            return -1
        except (OSError, RemoteStorageIntegrityError) as e:
            log.warning("log_start_local_copy_unreadable", path=str(path), error=str(e))
            return -1

    def _save_local(self, tp: TopicIdPartition, bound: int) -> None:
        atomic_write(self._local_path(tp), log_start_object.encode(tp, bound, now_ms()), fsync=True)

    def _broker_earliest(self, tp: TopicPartition) -> int | None:
        """The broker's log start (ListOffsets EARLIEST), ``None`` without a broker or when it does
        not answer (the checkpoint and the published value still count)."""
        cfg = self.ctx.config
        if not cfg.bootstrap_servers:
            return None
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        from rlm.daemon.probes import admin_client

        with self._lock:
            if self._admin is None:
                conf: dict[str, Any] = {"bootstrap.servers": cfg.bootstrap_servers,
                                        "client.id": "rlm-sidecar"}
                conf.update(reveal_all(cfg.kafka_client))
                self._admin = admin_client(conf, "log_start")
            admin = self._admin
        timeout = cfg.metadata_request_timeout_ms / 1000
        try:
            spec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
            futs = admin.list_offsets({CkTopicPartition(tp.topic, tp.partition): spec},
                                      request_timeout=timeout)
            for fut in futs.values():
                return int(fut.result(timeout=timeout).offset)
        except (KafkaException, TimeoutError) as e:
            log.warning("log_start_broker_unavailable", topic=tp.topic, partition=tp.partition, error=str(e))
        return None

