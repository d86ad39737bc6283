"""Aborted transactions whose data a copied segment holds and whose ABORT marker is in a later,
still local, segment — written into the copied segment's remote ``.txnindex`` (compacted topics).

Why: Kafka keeps a ``.txnindex`` entry in the segment of the ABORT marker only. A compacted
topic's broker cleaner drops that entry once a pass no longer sees the aborted data: the first
pass removes the data locally (the remote copy of the data segment still has it), the next one
finds nothing left to describe and drops the marker with its entry. If the marker's segment is
tiered only after that, no remote ``.txnindex`` names the aborted data and remote read_committed
reads return it. At copy time the data segment is below the LSO, so every transaction with data
in it is decided and its entry is in a later local ``.txnindex`` (no cleaner pass has dropped it:
that needs the data gone locally, and the copy's :class:`~rlm.daemon.compacted.RewriteGuard`
undoes a copy whose segment the cleaner rewrote meanwhile). The copy writes those entries after
the segment's own, so the remote index names every aborted transaction over the segment whatever
the cleaner does later.

Kafka's readers accept the wider index (docs/compacted-topics.md): an entry is consulted for its
producer id and first offset only; its last offset is above the segment (Kafka's ``sanityCheck``
wants it at or above the base offset) and the entries stay in increasing last-offset order (as
``TransactionIndex.append`` requires); an entry found in two segments is listed once by the read
core (:func:`fetcher.transactions.collect_aborted_txns`), as Kafka's remote read collects into a
set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from rlm.daemon.compacted import SegmentRewrittenError, swap_in_progress
from rlm.errors import LogFileGoneError
from rlm.log.txn_index import AbortedTxn, collect_aborted, encode_txn_index, read_txn_index
from rlm.log.writer import atomic_write

_SUFFIX = ".txnindex"


def _later_txn_indexes(directory: Path, next_offset: int) -> list[tuple[int, Path]]:
    """``(base offset, path)`` of the partition's ``.txnindex`` files based at or above
    ``next_offset``, oldest first (only the broker's own names: ``.cleaned``, ``.swap`` and
    ``.deleted`` files are left out)."""
    out = []
    for name in os.listdir(directory):
        stem = name[: -len(_SUFFIX)]
        if name.endswith(_SUFFIX) and len(stem) == 20 and stem.isdigit() and int(stem) >= next_offset:
            out.append((int(stem), directory / name))
    return sorted(out)


def aborts_ahead(directory: Path, next_offset: int) -> list[AbortedTxn]:
    """The aborted transactions begun below ``next_offset`` (the copied segment's end + 1) whose
    ABORT marker is at or above it, from the later local segments' ``.txnindex`` files, in
    increasing marker order, each once. The walk stops where Kafka's search would: at an entry
    whose last stable offset reaches ``next_offset`` (every transaction begun below it had ended).

    Raises :class:`~rlm.daemon.compacted.SegmentRewrittenError` (retriable) when the broker's
    cleaner is swapping segments or a file vanished while it was read: an entry could be missed.
    """
    if swap_in_progress(directory):
        raise SegmentRewrittenError("the broker's cleaner is swapping segments", path=directory)
    found: dict[int, AbortedTxn] = {}
    try:
        for base, path in _later_txn_indexes(directory, next_offset):
            entries, complete = collect_aborted(read_txn_index(path, base), next_offset, next_offset)
            found.update((e.last_offset, e) for e in entries if e.last_offset not in found)
            if complete:
                break
    except (LogFileGoneError, FileNotFoundError) as e:
        raise SegmentRewrittenError(f"a later segment's transaction index vanished: {e}",
                                    path=directory) from e
    if swap_in_progress(directory):  # the old files deleted, the new ones not renamed yet
        raise SegmentRewrittenError("the broker's cleaner swapped segments during the read", path=directory)
    return [found[k] for k in sorted(found)]


def with_aborts_ahead(own: Iterable[AbortedTxn], ahead: Iterable[AbortedTxn]) -> list[AbortedTxn]:
    """A segment's own entries, then those of ``ahead`` (in marker order) whose marker is above all
    of them: one index in strictly increasing last-offset order without duplicates."""
    out = list(own)
    top = out[-1].last_offset if out else -1
    for e in ahead:
        if e.last_offset > top:
            out.append(e)
            top = e.last_offset
    return out


def remote_txn_index(own: Path, base_offset: int, from_offset: int, ahead: Sequence[AbortedTxn],
                     staged: Path) -> Path | None:
    """The ``.txnindex`` to upload for the local segment based at ``base_offset`` copied from
    ``from_offset`` on: the broker's own file ``own`` when the whole segment is copied and nothing
    is ``ahead`` (the broker's layout, not a byte changed); else, written at ``staged``, the own
    entries whose marker is copied (at or above ``from_offset``) followed by ``ahead``. ``None``
    when there is no entry at all (Kafka keeps no index for a segment without aborts)."""
    has_own = own.exists() and own.stat().st_size > 0
    if not ahead and from_offset == base_offset:
        return own if has_own else None
    try:
        mine = read_txn_index(own, base_offset) if has_own else []
    except LogFileGoneError as e:
        raise SegmentRewrittenError(f"the segment's transaction index vanished: {e}", path=own) from e
    entries = with_aborts_ahead((e for e in mine if e.last_offset >= from_offset), ahead)
    if not entries:
        return None
    atomic_write(staged, encode_txn_index(entries))
    return staged
