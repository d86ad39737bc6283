"""Last stable offset and aborted transactions of a partition, computed from its files.

RLM copies a segment only when its last offset is below the LSO, so a segment never reaches
remote storage while one of its transactions is undecided. The broker keeps the LSO in
memory; an external reader derives it: restore the newest producer snapshot at or below the
high watermark, scan the batches after it to the log end, and take the first offset of the
earliest transaction that is still open, or that completed at or above the high watermark
(``ProducerStateManager.firstUnstableOffset``), bounded by the HW
(``UnifiedLog.fetchLastStableOffsetMetadata``). The HW comes from the log dir's
``replication-offset-checkpoint``; it can be up to 5 s stale, which only errs low.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm.log.partition import LogDir, PartitionDir
from rlm.log.producer_state import ProducerStateTracker, feed, rebuild_producer_state
from rlm.log.txn_index import AbortedTxn, collect_aborted

FROM_CHECKPOINT = -2


@dataclass(frozen=True, slots=True)
class StableOffsets:
    """Offsets of a partition as a read_committed consumer sees them."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int | None
    first_unstable_offset: int | None
    last_stable_offset: int
    open_transactions: dict[int, int]  # producer id -> first offset of its open transaction


def stable_offsets(partition: PartitionDir, *, high_watermark: int | None = FROM_CHECKPOINT) -> StableOffsets:
    """LSO of ``partition``. ``high_watermark``: a known HW, None for "unknown" (then the LSO is
    bounded only by the log end), or by default the log dir's ``replication-offset-checkpoint``."""
    if high_watermark == FROM_CHECKPOINT:
        high_watermark = LogDir(partition.path.parent).high_watermark(partition.topic_partition)
    start = partition.log_start_offset
    if start is None:
        return StableOffsets(0, 0, None if high_watermark is None else 0, None, 0, {})
    leo = partition.log_end_offset()
    hw = None if high_watermark is None else max(start, min(high_watermark, leo))
    bound = leo if hw is None else hw
    snap = partition.latest_snapshot_at_or_below(bound)  # at or below the HW: sees every late marker
    tracker = rebuild_producer_state(partition, start if snap is None or snap < start else snap)
    if tracker.map_end_offset < leo:
        feed(tracker, partition, tracker.map_end_offset, leo)
    unstable = [c.first_offset for c in tracker.completed if c.last_offset >= bound]
    first_undecided = tracker.first_undecided_offset()
    if first_undecided is not None:
        unstable.append(first_undecided)
    first_unstable = min(unstable) if unstable else None
    lso = bound if first_unstable is None else min(first_unstable, bound)
    return StableOffsets(start, leo, hw, first_unstable, lso, tracker.open_transactions())


def last_stable_offset(partition: PartitionDir, *, high_watermark: int | None = FROM_CHECKPOINT) -> int:
    return stable_offsets(partition, high_watermark=high_watermark).last_stable_offset


def aborted_transactions(partition: PartitionDir, start_offset: int,
                         upper_bound_offset: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping [start_offset, upper_bound_offset) from the ``.txnindex``
    files, walking segments from the one holding ``start_offset`` as
    ``UnifiedLog.collectAbortedTransactions`` does (what a read_committed fetch returns)."""
    first = partition.segment_for(start_offset) or (partition.segments[0] if partition.segments else None)
    out: list[AbortedTxn] = []
    if first is None:
        return out
    for seg in partition.segments:
        if seg.base_offset < first.base_offset:
            continue
        entries = partition.aborted_transactions(seg)
        found, complete = collect_aborted(entries, start_offset, upper_bound_offset)
        out += found
        if complete:
            break
    return out


def scan_aborted_transactions(partition: PartitionDir, end_offset: int | None = None) -> list[AbortedTxn]:
    """Every aborted transaction whose ABORT marker is below ``end_offset`` (default: log end),
    derived from the batches alone, with the LSO values the broker writes to ``.txnindex``."""
    start = partition.log_start_offset
    if start is None:
        return []
    end = partition.log_end_offset() if end_offset is None else end_offset
    tracker = ProducerStateTracker(map_end_offset=start)
    feed(tracker, partition, start, end)
    return list(tracker.aborted)
