"""Leader-epoch lineage: which remote segments, and which of their offsets, are the current history.

One implementation for every user: the read core's planning (:mod:`fetcher.planning`), the copy
task, the expiry task and ``rlm verify``, so a reader and the expirer can never disagree on what
is on the lineage. Pure functions over ``(epoch, start_offset)`` lists (ascending).

Where the lineage comes from. A broker beside this sidecar knows nothing of the remote tier: its
``leader-epoch-checkpoint`` describes only its *local* log, and local retention truncates it from
the front, rewriting the first entry's start to the local log start. Kafka's tiered brokers do not
have that problem (they rebuild the cache from remote data and truncate it only at the overall log
start); here the lineage is merged from *observations* instead (:func:`merge_lineage`):

- every FINISHED remote segment's epoch entries (what its writer's log held for its range), the
  daemon's remembered history, and the broker's checkpoint are observations of real data, so the
  true start of an epoch is the *earliest* start any of them saw (an observation can start an
  epoch late, after a truncation from the front, never early);
- a newer epoch that starts at or before an older epoch's start truncated the older one (an
  unclean election): the older epoch is not on the lineage;
- the leader's own checkpoint (the *authority*) is exact from its first entry on, except that
  the first entry's start means "began at or before": below it only older epochs can lie.

A segment's records are on the lineage up to :func:`lineage_last_offset`; :func:`chain` picks the
segments readers read. Kafka's rules used elsewhere: ``findHighestRemoteOffset``,
``buildFilteredLeaderEpochMap`` and ``LeaderEpochFileCache.epochEntriesInRange``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentState

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


def merge_lineage(
    observations: Iterable[Epochs], authority: Epochs = (), authority_end: int | None = None
) -> list[tuple[int, int]]:
    """The current lineage from epoch observations and, where known, the leader's own checkpoint.

    ``observations``: epoch lists seen anywhere (remote segments, remembered history); each epoch
    starts at the earliest offset observed. ``authority``: the leading broker's checkpoint, exact
    from its first entry on, whose first entry began at or before its start (local retention
    truncates it from the front); observed epochs between its entries are not on the lineage,
    observed epochs newer than its last are if they start at or after ``authority_end`` (the
    leader's log end offset; its last entry's start when not given). Newer epochs starting at
    or before an older epoch's start truncate the older one. Empty epochs (a start equal to the
    next epoch's) are kept, as in a broker's checkpoint; :func:`filtered_epochs` drops them
    where only epochs with records count.
    """
    first_start: dict[int, int] = {}
    for entries in observations:
        for epoch, start in entries:
            if epoch not in first_start or start < first_start[epoch]:
                first_start[epoch] = start
    auth = sorted(authority)
    if auth:
        head_epoch, head_start = auth[0]
        head_start = min(head_start, first_start.get(head_epoch, head_start))
        below = [(e, s) for e, s in sorted(first_start.items()) if e < head_epoch and s < head_start]
        # epochs newer than any the broker knows, starting after its last one, continue its log
        # (this node's view of leadership is behind); one starting earlier contradicts the
        # leader's own log, which wins: that segment stays off the lineage (and in quarantine)
        end = auth[-1][1] if authority_end is None else max(authority_end, auth[-1][1])
        newer = [(e, s) for e, s in sorted(first_start.items()) if e > auth[-1][0] and s >= end]
        entries_in_order = [*below, (head_epoch, head_start), *auth[1:], *newer]
    else:
        entries_in_order = sorted(first_start.items())
    stack: list[tuple[int, int]] = []
    for epoch, start in entries_in_order:
        while stack and stack[-1][1] > start:
            stack.pop()  # a newer epoch starting earlier truncated the older one's history
        stack.append((epoch, start))
    return stack


def finished_only(segments: Iterable[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
    """The segments that hold readable data: COPY_SEGMENT_FINISHED ones."""
    return [md for md in segments if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def lineage_from_segments(segments: Iterable[RemoteLogSegmentMetadata]) -> list[tuple[int, int]]:
    """The lineage a reader derives from remote metadata alone (FINISHED segments' epochs)."""
    return filtered_epochs(merge_lineage(md.segment_leader_epochs for md in finished_only(segments)))


def lineage_last_offset(md: RemoteLogSegmentMetadata, lineage: Sequence[tuple[int, int]]) -> int:
    """Last offset of ``md`` that agrees with ``lineage`` (``start_offset - 1`` when none does).

    A segment agrees while each of its epochs is a lineage epoch that began no later than the
    segment says and had not yet been followed by the next lineage epoch (empty lineage epochs,
    which hold no record, are ignored).
    """
    lineage = filtered_epochs(lineage)
    lin = dict(lineage)
    lin_epochs = [e for e, _ in lineage]
    seg = list(md.segment_leader_epochs)
    last_ok = md.start_offset - 1
    for i, (epoch, start) in enumerate(seg):
        seg_end = seg[i + 1][1] - 1 if i + 1 < len(seg) else md.end_offset
        if seg_end < start:
            continue  # an epoch with no records in this segment
        if epoch not in lin or start < lin[epoch]:
            return last_ok
        j = lin_epochs.index(epoch)
        lin_end = lineage[j + 1][1] - 1 if j + 1 < len(lineage) else None
        if lin_end is not None and seg_end > lin_end:
            return max(last_ok, min(seg_end, lin_end))
        last_ok = seg_end
    return last_ok


Link = tuple[RemoteLogSegmentMetadata, int, int]
"""One link of a read chain: the segment serves offsets ``first..last`` (inclusive)."""


def chain(
    segments: Iterable[RemoteLogSegmentMetadata], lineage: Sequence[tuple[int, int]]
) -> tuple[list[Link], list[tuple[int, int]]]:
    """The segments a reader reads, oldest first, and the gaps ``(first, last)`` between them.

    Only FINISHED segments count; each serves its offsets that agree with ``lineage``. Among
    segments covering the next offset, the one reaching furthest is taken (fewest reads); among
    equals one wholly on the lineage (so a diverged copy is left unread and can be dropped), then,
    between copies of the very same range, the one finished later (:func:`finished_later`), then
    the lowest segment id, so every process picks the same copy.
    """
    candidates: list[Link] = []
    for md in finished_only(segments):
        last = lineage_last_offset(md, lineage)
        if last >= md.start_offset:
            candidates.append((md, md.start_offset, last))
    candidates.sort(key=lambda c: (c[1], str(c[0].remote_log_segment_id.id)))

    def reach(c: Link) -> tuple[int, bool]:
        return c[2], c[2] >= c[0].end_offset

    def wins(c: Link, best: Link) -> bool:
        if reach(c) != reach(best):
            return reach(c) > reach(best)
        return finished_later(c[0], best[0])  # the same range: the later copy (else the first of equals)

    links: list[Link] = []
    gaps: list[tuple[int, int]] = []
    i = 0
    cursor = candidates[0][1] if candidates else 0
    while i < len(candidates):
        best: Link | None = None
        while i < len(candidates) and candidates[i][1] <= cursor:
            c = candidates[i]
            if c[2] >= cursor and (best is None or wins(c, best)):
                best = c
            i += 1
        if best is None:
            if i >= len(candidates):
                break  # the rest lie inside what the chain already covers
            nxt = candidates[i]
            gaps.append((cursor, nxt[1] - 1))
            cursor = nxt[1]
            continue
        links.append((best[0], cursor, best[2]))
        cursor = best[2] + 1
    return links, gaps


@dataclass(frozen=True, slots=True)
class LineageVerdict:
    """FINISHED segments split by the lineage: ``kept`` (on it, or read by some chain),
    ``off_lineage`` (candidates for quarantine: not wholly on it and read by no chain) and
    ``replaced`` (``(segment, by)`` pairs, see :func:`replaced_by`: on the lineage but read by no
    chain because a segment with a strictly larger range serves all of their offsets)."""

    lineage: tuple[tuple[int, int], ...]
    kept: tuple[RemoteLogSegmentMetadata, ...]
    off_lineage: tuple[RemoteLogSegmentMetadata, ...]
    replaced: tuple[tuple[RemoteLogSegmentMetadata, RemoteLogSegmentMetadata], ...] = ()


def finished_later(new: RemoteLogSegmentMetadata, old: RemoteLogSegmentMetadata) -> bool:
    """``new`` and ``old`` cover the same range and ``new`` finished later (a larger
    ``event_timestamp_ms``: its COPY_SEGMENT_FINISHED event's time, the object's time after
    ``rlm metadata rebuild``). Between copies of one range readers read the later one, as Kafka's
    ``RemoteLogMetadataCache`` maps a start offset to the segment finished last; that is how a
    remote compaction of a *single* segment (same range, fewer records) wins over its input. The
    job publishes such an output only when its clock is past the input's finish time by a margin
    (:data:`rlm.daemon.remote_compaction_lone.LONE_MARGIN_MS`), so the order holds across nodes and
    the second-granular object times of a rebuild."""
    return ((new.start_offset, new.end_offset) == (old.start_offset, old.end_offset)
            and new.event_timestamp_ms > old.event_timestamp_ms)


def replaced_by(md: RemoteLogSegmentMetadata, links: Sequence[Link]) -> RemoteLogSegmentMetadata | None:
    """The segment that replaces ``md`` in the read chain ``links``, or None.

    The replacement rule, in one place for the read core, the daemon (retention, the remote
    compaction job), ``rlm verify`` and ``rlm metadata rebuild``: a FINISHED segment that no link
    reads is *replaced* when one link's segment serves every offset of it (``first <= start`` and
    ``last >= end``) and that segment's range is strictly larger. A remote compaction's output is
    such a segment: it keeps the first input's base offset and the last input's end offset and
    always merges two or more inputs, so :func:`chain` (the furthest reach wins) reads it and
    never its inputs, whatever state a crash left them in, and every offset is read once. A
    compaction of a single segment keeps its range: its output replaces it when it
    :func:`finished_later` and its size differs (records were removed or re-framed). An exact
    duplicate (the same range and size: the copier's, twice) is not a replacement: it stays kept
    and unread, as before. Kafka's ``RemoteLogMetadataCache`` agrees where it can tell: the
    compacted segment starts at the first input's start offset and finished later, so it takes
    that offset's slot.
    """
    for other, first, last in links:
        if other.remote_log_segment_id == md.remote_log_segment_id:
            continue
        if first <= md.start_offset and last >= md.end_offset and (
            other.start_offset < md.start_offset or other.end_offset > md.end_offset
            or (finished_later(other, md) and other.segment_size_in_bytes != md.segment_size_in_bytes)
        ):
            return other
    return None


def judge_segments(
    segments: Iterable[RemoteLogSegmentMetadata], lineage: Sequence[tuple[int, int]]
) -> LineageVerdict:
    """Which FINISHED segments the lineage keeps, and which it would drop — never one a read needs.

    A segment is off the lineage when some of its records disagree with ``lineage`` (the
    daemon's, which knows more than remote metadata: the leader's own checkpoint and memory). It
    is a deletion candidate only if the read chain over ``lineage`` does not use it, so dropping
    every candidate leaves every readable offset readable. (A reader without a broker derives
    its lineage from remote metadata alone; where that disagrees with the leader's, the
    leader's is right, and dropping the candidates brings the reader's in line.) A segment on
    the lineage that the chain does not read because a larger one serves all of it is
    ``replaced`` (:func:`replaced_by`), neither kept (retention does not count it, rebuild does not
    restore it) nor off the lineage (it is deleted as a finished replacement, not quarantined).
    """
    finished = finished_only(segments)
    lineage = filtered_epochs(lineage)
    links = chain(finished, lineage)[0]
    used = {md.remote_log_segment_id for md, _, _ in links}
    kept: list[RemoteLogSegmentMetadata] = []
    off: list[RemoteLogSegmentMetadata] = []
    replaced: list[tuple[RemoteLogSegmentMetadata, RemoteLogSegmentMetadata]] = []
    for md in finished:
        whole = lineage_last_offset(md, lineage) >= md.end_offset
        by = None if md.remote_log_segment_id in used or not whole else replaced_by(md, links)
        if by is not None:
            replaced.append((md, by))
        elif whole or md.remote_log_segment_id in used:
            kept.append(md)
        else:
            off.append(md)
    return LineageVerdict(tuple(lineage), tuple(kept), tuple(off), tuple(replaced))
