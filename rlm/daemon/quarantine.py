"""Off-lineage segments are quarantined, not deleted at once.

A FINISHED remote segment that the current leader-epoch lineage does not contain is *probably*
a diverged leader's data (an unclean election). But a wrong verdict deletes acknowledged history
that exists nowhere else — which happened when a returning leader judged the lineage from a
broker checkpoint that local retention had truncated. So a candidate is first kept: it is
listed in ``rlm status`` and ``rlm verify``, counted in ``rlm_remote_segments_quarantined`` and
logged; only when it is still a candidate after ``off_lineage_grace_ms`` (default 7 days) does
the expirer delete it. An operator thus has the grace period to notice and stop a wrong
deletion, and a verdict that changes back (more metadata seen, leadership moved) releases it.

The first-seen times are kept in the work dir, so a restart does not reset the grace period.
The age is read from the wall clock; one that went backwards counts as age 0 (never negative).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import structlog

from rlm.daemon.workdir import atomic_write, partition_state_file
from rlm.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Quarantined:
    """One quarantined segment: what ``rlm status`` shows of it."""

    segment_id: str
    start_offset: int
    end_offset: int
    first_seen_ms: int
    delete_after_ms: int

    def as_list(self) -> list[int | str]:
        return [self.segment_id, self.start_offset, self.end_offset, self.delete_after_ms]


class OffLineageQuarantine:
    """Per-partition first-seen times of off-lineage candidates, persisted in ``work_dir/quarantine``."""

    def __init__(self, work_dir: Path) -> None:
        self.dir = work_dir / "quarantine"
        self._lock = threading.Lock()

    def _path(self, tp: TopicIdPartition) -> Path:
        return partition_state_file(self.dir, tp)

    def review(
        self,
        tp: TopicIdPartition,
        candidates: list[RemoteLogSegmentMetadata],
        grace_ms: int,
        now_ms: int,
    ) -> tuple[list[RemoteLogSegmentMetadata], list[Quarantined]]:
        """Record new candidates, release those no longer candidates; return (due for deletion, held).

        A segment is due once it has been a candidate for ``grace_ms``; the others stay held.
        """
        with self._lock:
            seen = self._load(tp)
            ids = {md.remote_log_segment_id.id.text: md for md in candidates}
            kept = {sid: t for sid, t in seen.items() if sid in ids}
            for sid, md in ids.items():
                if sid not in kept:
                    kept[sid] = now_ms
                    log.warning(
                        "segment_quarantined",
                        topic=tp.topic,
                        partition=tp.partition,
                        segment_id=sid,
                        start_offset=md.start_offset,
                        end_offset=md.end_offset,
                        epochs=[list(e) for e in md.segment_leader_epochs],
                        delete_after_ms=now_ms + grace_ms,
                        why="not on the current leader-epoch lineage and not needed by any read",
                    )
            for sid in set(seen) - set(kept):
                log.info("segment_released_from_quarantine", topic=tp.topic, partition=tp.partition,
                         segment_id=sid)
            if kept != seen:
                self._save(tp, kept)
            due: list[RemoteLogSegmentMetadata] = []
            held: list[Quarantined] = []
            for sid, first in sorted(kept.items(), key=lambda kv: ids[kv[0]].start_offset):
                md = ids[sid]
                if max(0, now_ms - first) >= grace_ms:
                    due.append(md)
                else:
                    held.append(Quarantined(sid, md.start_offset, md.end_offset, first, first + grace_ms))
            return due, held

    def release(self, tp: TopicIdPartition, segment_ids: set[RemoteLogSegmentId]) -> None:
        """Forget segments deleted meanwhile (by the grace period or retention)."""
        texts = {s.id.text for s in segment_ids}
        with self._lock:
            seen = self._load(tp)
            kept = {sid: t for sid, t in seen.items() if sid not in texts}
            if kept != seen:
                self._save(tp, kept)

    def _load(self, tp: TopicIdPartition) -> dict[str, int]:
        try:
            raw = json.loads(self._path(tp).read_text(encoding="utf-8"))
            return {str(k): int(v) for k, v in raw.items()}
        except (FileNotFoundError, ValueError, TypeError, AttributeError):
            return {}

    def _save(self, tp: TopicIdPartition, seen: dict[str, int]) -> None:
        atomic_write(self._path(tp), json.dumps(seen, sort_keys=True).encode())
