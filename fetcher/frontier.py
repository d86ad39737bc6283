"""Transactions at the tiering frontier: what the broker's untiered log says about them.

A transaction can start in the last tiered segment and end (COMMIT or ABORT marker) in a later
segment that is still only local. The remote tier alone cannot tell its outcome, so on its own
the read side must stop read_committed reads at the transaction's first offset (the remote LSO)
— short of what the broker serves. Kafka's own remote read collects aborted transactions from
later segments *including local ones* and bounds read_committed by the partition's LSO; this
module gives the read core the same two facts from the broker's log dir, read-only:

- the partition's last stable offset (:func:`rlm.log.lso.stable_offsets`: producer state from the
  newest snapshot at or below the high watermark, bounded by it), and
- the aborted transactions whose data reaches into the remote tier and whose ABORT marker lies
  beyond it (the local segments' ``.txnindex`` entries).

When the log dir does not hold the partition, or it does not reach back to the remote end (a
copy gap), there is no frontier: readers stop at the remote LSO and say so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from rlm.errors import RlmError
from rlm.log.lso import stable_offsets
from rlm.log.partition import PartitionDir
from rlm.log.txn_index import AbortedTxn, read_txn_index
from rlm.types import TopicIdPartition, check_topic_name

log = structlog.get_logger(__name__)

_TTL_S = 1.0


@dataclass(frozen=True, slots=True)
class Frontier:
    """The untiered log's answer for the transactions open at the end of the remote tier."""

    last_stable_offset: int
    """The partition's LSO: read_committed readers see records below it (remote ones included)."""
    aborted: tuple[AbortedTxn, ...]
    """Aborted transactions with data at or below the remote end and their marker after it."""
    source: str


class FrontierSource(Protocol):
    """Anything that can tell the outcome of the transactions open at the remote end: the broker's
    log dir (:class:`LogDirFrontier`), or a face that talks to the broker (the Kafka endpoint in
    merged mode asks the broker with a read_committed Fetch)."""

    def frontier(self, tp: TopicIdPartition, remote_end: int) -> Frontier | None:
        """Facts for a remote tier ending at ``remote_end`` (inclusive), or ``None`` if unknown."""
        ...


class LogDirFrontier:
    """Frontier facts from the broker's log dirs (cached about a second per partition).

    The LSO comes from ``broker_lso`` (the broker's ListOffsets answer) when given: the log dir's
    own estimate is bounded by the high watermark of ``replication-offset-checkpoint``, written
    every 5 s, so it lags (never runs ahead). The aborted transactions always come from the log
    dir: an ABORT marker below the broker's LSO is in its files.
    """

    def __init__(self, log_dirs: Sequence[Path],
                 broker_lso: Callable[[TopicIdPartition], int] | None = None) -> None:
        self._log_dirs = [Path(d) for d in log_dirs]
        self._broker_lso = broker_lso
        self._lock = threading.Lock()
        self._cache: dict[tuple[TopicIdPartition, int], tuple[float, Frontier | None]] = {}

    def frontier(self, tp: TopicIdPartition, remote_end: int) -> Frontier | None:
        """Facts for a remote tier ending at ``remote_end`` (inclusive), or ``None`` if unknown here."""
        key = (tp, remote_end)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < _TTL_S:
                return hit[1]
        found = self._read(tp, remote_end)
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < _TTL_S}
            self._cache[key] = (now, found)
        return found

    def _partition_dir(self, tp: TopicIdPartition) -> PartitionDir | None:
        name = f"{check_topic_name(tp.topic)}-{tp.partition}"
        for d in self._log_dirs:
            path = d / name
            if not path.is_dir():
                continue
            pdir = PartitionDir(path)
            try:
                if pdir.topic_id != tp.topic_id:
                    continue  # a re-created topic of the same name
            except RlmError:
                continue
            return pdir
        return None

    def _read(self, tp: TopicIdPartition, remote_end: int) -> Frontier | None:
        try:
            pdir = self._partition_dir(tp)
            if pdir is None or not pdir.segments:
                return None
            if pdir.segments[0].base_offset > remote_end + 1:
                log.warning("frontier_unknown", topic=tp.topic, partition=tp.partition,
                            remote_end=remote_end, local_start=pdir.segments[0].base_offset,
                            why="the local log does not reach back to the remote end (a copy gap)")
                return None
            lso = (self._broker_lso(tp) if self._broker_lso is not None
                   else stable_offsets(pdir).last_stable_offset)
            aborted: list[AbortedTxn] = []
            segs = pdir.segments
            for seg, nxt in zip(segs, [*segs[1:], None], strict=True):
                if nxt is not None and nxt.base_offset <= remote_end + 1:
                    continue  # wholly tiered: its aborts are in the remote txn indexes
                if not seg.txn_index_path.exists():
                    continue
                aborted += [a for a in read_txn_index(seg.txn_index_path, seg.base_offset)
                            if a.first_offset <= remote_end < a.last_offset]
            return Frontier(lso, tuple(sorted(aborted, key=lambda a: a.last_offset)), "log_dir")
        except (RlmError, OSError, ValueError) as e:  # the broker moves files under us
            log.warning("frontier_unreadable", topic=tp.topic, partition=tp.partition, error=str(e))
            return None

