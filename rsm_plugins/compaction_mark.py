"""The compaction mark: a remote-compaction output says, in its own metadata, how far it cleaned.

Why: the remote compaction job (:mod:`rlm.daemon.remote_compaction`) needs its *remote cleaner
checkpoint* — the offset below which the tiered history is already compacted — to decide what is
dirty, and ``rlm verify --deep`` needs it to tell a segment the job compacted (the remote copy may
lack records the broker still holds) from a damaged copy. Kept in one node's work dir, it was lost
with the leader: another node's daemon, or a fresh work dir, counted the whole history dirty and
verify reported compacted ranges as ``local_segment_mismatch``. So every compacted segment carries
the mark in its **custom metadata** (KIP-917: an opaque tagged field of Kafka's metadata record,
stored in ``__remote_log_metadata`` and in the segment's descriptor, so ``rlm metadata rebuild``
keeps it), wrapped around the custom metadata the storage plugin returned for the copy:

====== ===================================================================
bytes  meaning
====== ===================================================================
1      magic ``0xA7`` (``0xA5`` is :mod:`rsm_plugins.integrity`'s manifest,
       ``0xA6`` :mod:`rsm_plugins.redirect`'s)
1      format version (1)
n      uvarint: the clean end — the exclusive end offset the compaction consumed (its output's
       end offset + 1); every offset below it was compacted
rest   the plugin's custom metadata for the copy (checksums, location), may be empty
====== ===================================================================

Size: 2 + 1..9 (4 bytes up to offset 2^28, 5 up to 2^35) + inner. Kafka's broker undoes a copy
whose custom metadata exceeds ``remote.log.metadata.custom.metadata.max.bytes`` (default 128) and
stops copying the partition, and so does the daemon (:func:`rlm.daemon.remote_ops.publish_segment`):
:func:`encode` raises :class:`CompactionMarkTooLarge` rather than exceed a budget, and the job then
re-encodes the plugin's manifest without its optional location (the manifest's own rule).

Order with the redirect of an adopted segment (``rlm restore --adopt-into``): the redirect is
always outermost — adoption wraps whatever the segment carried, and :func:`encode` puts a mark
*inside* an existing redirect — so :func:`rsm_plugins.redirect.decode` always finds its part at byte
0; :func:`decode` and :func:`inner_custom_metadata` look through a redirect, and
:func:`rsm_plugins.integrity.decode` reads the manifest under both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rlm.errors import RemoteStorageError, RemoteStorageIntegrityError
from rlm.types import RemoteLogSegmentMetadata
from rsm_plugins import redirect
from rsm_plugins.redirect import _read_uvarint, _uvarint

MAGIC = 0xA7
VERSION = 1


class CompactionMarkTooLarge(RemoteStorageError):
    """The mark and the plugin's custom metadata together exceed the custom metadata budget."""


@dataclass(frozen=True, slots=True)
class CompactionMark:
    """How far a compacted segment cleaned, and the custom metadata of its copy."""

    clean_end: int
    inner: bytes | None


def overhead(clean_end: int) -> int:
    """Bytes the mark adds around the inner custom metadata."""
    return 2 + len(_uvarint(clean_end))


def encode(clean_end: int, inner: bytes | None, max_bytes: int | None = None) -> bytes:
    """``inner`` marked as compacted below ``clean_end``, in at most ``max_bytes``.

    A mark already there is replaced, never nested; inside a redirect the mark goes under it.
    Raises :class:`ValueError` for a negative offset and :class:`CompactionMarkTooLarge` when
    the result would not fit ``max_bytes``.
    """
    if clean_end < 0:
        raise ValueError(f"clean end {clean_end} is negative")
    moved = redirect.decode(inner)
    if moved is not None:
        budget = None if max_bytes is None else max_bytes - (len(inner or b"") - len(moved.inner or b""))
        return redirect.encode(moved.stored, encode(clean_end, moved.inner, budget))
    found = decode(inner)
    if found is not None:
        inner = found.inner
    out = bytes([MAGIC, VERSION]) + _uvarint(clean_end) + (inner or b"")
    if max_bytes is not None and len(out) > max_bytes:
        raise CompactionMarkTooLarge(
            f"compaction mark ({overhead(clean_end)} bytes) and the copy's custom metadata "
            f"({len(inner or b'')} bytes) need {len(out)} bytes, above the budget of {max_bytes}")
    return out


def decode(blob: bytes | None) -> CompactionMark | None:
    """The mark carried by ``blob`` (looking through a redirect), ``None`` when there is none.

    Raises :class:`RemoteStorageIntegrityError` when it is a mark but malformed (the error names
    what is wrong), and when a redirect around it is malformed.
    """
    blob = redirect.inner_custom_metadata(blob)
    if not blob or blob[0] != MAGIC:
        return None
    try:
        if len(blob) < 3:
            raise ValueError(f"{len(blob)} bytes, the header needs 3")
        if blob[1] != VERSION:
            raise ValueError(f"unsupported version {blob[1]}")
        clean_end, pos = _read_uvarint(blob, 2)
    except ValueError as e:
        raise RemoteStorageIntegrityError(
            f"compaction mark in the segment's custom metadata is malformed: {e}") from e
    return CompactionMark(clean_end, bytes(blob[pos:]) or None)


def inner_custom_metadata(blob: bytes | None) -> bytes | None:
    """``blob`` without a redirect or a mark around it: the plugin's own custom metadata."""
    found = decode(blob)
    return found.inner if found is not None else redirect.inner_custom_metadata(blob)


def clean_end_of(segments: Iterable[RemoteLogSegmentMetadata]) -> int:
    """The remote cleaner checkpoint of a partition: the largest clean end marked on
    ``segments`` (the caller passes those it reads: FINISHED, on the read chain), 0 when none is
    marked. A malformed mark counts as none: it only makes more of the history count as dirty,
    and ``rlm verify`` reports the malformed custom metadata itself (its checksum check)."""
    best = 0
    for md in segments:
        try:
            found = decode(md.custom_metadata)
        except RemoteStorageIntegrityError:
            continue
        if found is not None:
            best = max(best, found.clean_end)
    return best
