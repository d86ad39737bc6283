"""Leader-epoch lineage: which remote segments belong to the current leader's history.

Pure functions over ``(epoch, start_offset)`` lists (ascending), so the copy and expiry tasks and
their tests share one implementation of Kafka's rules (``RemoteLogManager.findHighestRemoteOffset``,
``isRemoteSegmentWithinLeaderEpochs``, ``buildFilteredLeaderEpochMap`` and
``LeaderEpochFileCache.epochEntriesInRange``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlm.types import RemoteLogSegmentMetadata

Epochs = Sequence[tuple[int, int]]


def filtered_epochs(epochs: Epochs) -> list[tuple[int, int]]:
    """Drop epochs that hold no records (their start equals the next epoch's start)."""
    out: list[tuple[int, int]] = []
    items = sorted(epochs)
    for i, (epoch, start) in enumerate(items):
        if i + 1 < len(items) and items[i + 1][1] == start:
            continue
        out.append((epoch, start))
    return out


def epochs_for_range(epochs: Epochs, start: int, end_exclusive: int) -> list[tuple[int, int]]:
    """Epoch entries covering ``[start, end_exclusive)``; the one covering ``start`` re-keyed to ``start``.

    Empty epochs inside the range are dropped (they name no record of the segment). An empty
    checkpoint yields ``[(0, start)]`` as a broker with no epoch history would report epoch 0.
    """
    items = filtered_epochs(epochs)
    out: list[tuple[int, int]] = []
    for epoch, s in items:
        if s >= end_exclusive:
            break
        if s <= start:
            out = [(epoch, start)]
        else:
            out.append((epoch, s))
    return out or [(0, start)]


def checkpoint_bytes(epochs: Epochs, before: int) -> bytes:
    """Leader-epoch checkpoint text of every entry whose start < ``before`` (Kafka's format, version 0)."""
    kept = [(e, s) for e, s in sorted(epochs) if s < before]
    lines = ["0", str(len(kept))] + [f"{e} {s}" for e, s in kept]
    return ("\n".join(lines) + "\n").encode()


def epoch_end_offset(epochs: Epochs, epoch: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka's ``endOffsetFor``: (largest epoch <= ``epoch``, exclusive end offset of it)."""
    items = sorted(epochs)
    chosen: tuple[int, int] | None = None
    for i, (e, _s) in enumerate(items):
        if e <= epoch:
            nxt = items[i + 1][1] if i + 1 < len(items) else log_end_offset
            chosen = (e, nxt)
    return chosen if chosen is not None else (-1, -1)


def find_highest_remote_offset(
    epochs: Epochs, log_end_offset: int, highest_offset_for_epoch: Callable[[int], int | None]
) -> tuple[int, int]:
    """Where copying resumes: walk the epoch history backwards to the first epoch with remote data.

    Returns ``(offset, epoch)``, ``(-1, -1)`` when nothing of this lineage is remote.
    """
    for epoch, _start in sorted(epochs, reverse=True):
        highest = highest_offset_for_epoch(epoch)
        if highest is None:
            continue
        e2, end = epoch_end_offset(epochs, epoch, log_end_offset)
        if end <= highest:
            return end - 1, e2
        return highest, epoch
    return -1, -1


def is_within_lineage(md: RemoteLogSegmentMetadata, log_end_offset: int, leader_epochs: Epochs) -> bool:
    """Kafka's ``isRemoteSegmentWithinLeaderEpochs`` over filtered epoch lists."""
    lineage = filtered_epochs(leader_epochs)
    if not lineage:
        return False
    seg = filtered_epochs(md.segment_leader_epochs)
    if not seg:
        return False
    lineage_map = dict(lineage)
    lineage_keys = [e for e, _ in lineage]
    seg_last_epoch = seg[-1][0]
    if seg_last_epoch < lineage_keys[0] or seg_last_epoch > lineage_keys[-1]:
        return False
    seg_first = next((e for e, _ in seg if e >= lineage_keys[0]), None)
    if seg_first is None:
        return False
    seg_after = [(e, s) for e, s in seg if e >= seg_first]
    for i, (epoch, offset) in enumerate(seg_after):
        if epoch not in lineage_map:
            return False
        if epoch == seg_first and epoch != lineage_keys[0] and offset < lineage_map[epoch]:
            return False
        idx = lineage_keys.index(epoch)
        if i == len(seg_after) - 1:
            if idx + 1 < len(lineage_keys) and md.end_offset > lineage[idx + 1][1] - 1:
                return False
        else:
            if idx + 1 >= len(lineage) or lineage[idx + 1] != seg_after[i + 1]:
                return False
    return md.end_offset < log_end_offset
