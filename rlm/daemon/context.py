"""What every partition task shares: plugins, metrics, quota, the stop event and the in-flight copies.

Also the daemon's own epoch history. A broker that does not know about tiering moves its log
start offset with *local* retention and truncates ``leader-epoch-checkpoint`` from the front;
the daemon remembers the epochs it has seen (in its work dir) and merges them with the remote
segments' epochs, so that remote segments written under epochs the broker has since forgotten
stay on the lineage (:mod:`rlm.lineage`).
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm.config import DaemonConfig
from rlm.daemon.clock import wall_ms
from rlm.daemon.metrics import DaemonMetrics
from rlm.daemon.quota import CopyQuota
from rlm.daemon.status import StatusBoard
from rlm.daemon.workdir import atomic_write, partition_state_file, writing
from rlm.errors import MetadataTimeoutError
from rlm.lineage import finished_only, merge_lineage
from rlm.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition, check_topic_name


def now_ms() -> int:
    """Wall-clock milliseconds (:mod:`rlm.daemon.clock`); never use it to schedule or time out."""
    return wall_ms()


def wait_result(value: Any, timeout_s: float | None = None) -> Any:
    """Metadata calls may return a future (Kafka style) or a plain value; wait for either, a future
    at most ``timeout_s`` (then :class:`MetadataTimeoutError`, retriable: the write may or may not
    have happened, which the copy protocol tolerates)."""
    result = getattr(value, "result", None)
    if not callable(result):
        return value
    if timeout_s is None:
        return result()
    try:
        return result(timeout=timeout_s)
    except (concurrent.futures.TimeoutError, TimeoutError) as e:
        raise MetadataTimeoutError(f"metadata call not answered within {timeout_s:g}s") from e


@dataclass
class TaskContext:
    config: DaemonConfig
    node_id: int
    rsm: Any
    rlmm: Any
    metrics: DaemonMetrics
    quota: CopyQuota
    status: StatusBoard
    stop: threading.Event = field(default_factory=threading.Event)
    in_flight: dict[RemoteLogSegmentId, float] = field(default_factory=dict)  # id -> monotonic start
    in_flight_lock: threading.Lock = field(default_factory=threading.Lock)
    copy_disabled: set[TopicIdPartition] = field(default_factory=set)
    #: asked before a copy is marked FINISHED: does this node still lead the partition? (None =
    #: standalone, always). A copy finished after leadership moved would duplicate the new
    #: leader's copy of the same range, or end up off the new leader's epoch lineage.
    still_leads: Callable[[TopicIdPartition], bool] | None = None

    def in_flight_started(self) -> list[float]:
        with self.in_flight_lock:
            return list(self.in_flight.values())

    def meta(self, value: Any) -> Any:
        """:func:`wait_result` bounded by ``metadata_request_timeout_ms``."""
        return wait_result(value, self.config.metadata_request_timeout_ms / 1000)

    @property
    def work_dir(self) -> Path:
        return self.config.work_dir

    def staging_dir(self, tp: TopicIdPartition) -> Path:
        """Scratch space for one partition inside the daemon's own work dir (never the broker's)."""
        d = self.work_dir / "staging" / f"{check_topic_name(tp.topic)}-{tp.partition}"
        with writing(d):
            d.mkdir(parents=True, exist_ok=True)
        return d


class EpochHistory:
    """Per-partition epoch history: what this node has seen, kept in its work dir, merged with the
    broker's current checkpoint and the remote segments' epochs (:func:`rlm.lineage.merge_lineage`).

    Every node learns it, leader or not (:meth:`merge` on each refresh for followers too), so a
    node that leads again still knows where the epochs it saw as a follower began, even after its
    broker's local retention truncated them away.
    """

    def __init__(self, work_dir: Path) -> None:
        self.dir = work_dir / "epochs"
        self._lock = threading.Lock()

    def _path(self, tp: TopicIdPartition) -> Path:
        return partition_state_file(self.dir, tp)

    def merge(
        self,
        tp: TopicIdPartition,
        checkpoint: Sequence[tuple[int, int]],
        segments: Iterable[RemoteLogSegmentMetadata] = (),
        log_end: int | None = None,
    ) -> list[tuple[int, int]]:
        """The lineage from the stored history and the FINISHED ``segments``' epochs (observations)
        with the broker's ``checkpoint`` as the authority over its log up to ``log_end``; saved if
        it changed.

        The checkpoint wins for everything from its first entry on (a truncation at the end after
        an unclean election must be followed); its first entry began at or before its start.
        """
        with self._lock:
            stored = self._load(tp)
            observed = [stored, *(md.segment_leader_epochs for md in finished_only(segments))]
            merged = merge_lineage(observed, checkpoint, log_end)
            if merged != stored:
                self._save(tp, merged)
            return merged

    def _load(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        try:
            raw = json.loads(self._path(tp).read_text(encoding="utf-8"))
            return sorted((int(e), int(s)) for e, s in raw)
        except (FileNotFoundError, ValueError, TypeError):
            return []

    def _save(self, tp: TopicIdPartition, entries: list[tuple[int, int]]) -> None:
        atomic_write(self._path(tp), json.dumps(entries).encode())

    def forget(self, tp: TopicIdPartition) -> None:
        with self._lock:
            self._path(tp).unlink(missing_ok=True)
