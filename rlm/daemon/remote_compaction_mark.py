"""The remote compaction job's mark on its output, kept within the custom metadata budget.

Why a module of its own: the mark's byte layout is :mod:`rsm_plugins.compaction_mark` (read by
verify, rebuild and the plugins' manifest decoding), but fitting it beside the storage plugin's
own custom metadata needs that plugin's manifest (:mod:`rsm_plugins.integrity`), which itself
unwraps marks — so the fitting lives here, on the only writer of marks.
"""

from __future__ import annotations

import structlog

from rlm.errors import RemoteStorageError
from rsm_plugins import compaction_mark, integrity

log = structlog.get_logger(__name__)


def marked(custom: bytes | None, clean_end: int, max_bytes: int) -> bytes | None:
    """``custom`` (what the plugin's copy returned) carrying the mark "compacted below
    ``clean_end``", in at most ``max_bytes``.

    When the mark does not fit, the plugin's manifest is re-encoded without its optional location
    (plugins find their objects without it, as for a copy whose location did not fit). When even
    that does not fit (a budget below ~60 bytes, or another plugin's large custom metadata), the
    segment is published unmarked (so too when the plugin's own custom metadata looks like a
    malformed redirect or mark) — the copy must not be undone and the partition's copying must
    not stop over a mark: a new leader then counts that history as dirty once, as before marks.
    """
    try:
        return compaction_mark.encode(clean_end, custom, max_bytes)
    except compaction_mark.CompactionMarkTooLarge as e:
        why = str(e)
    except RemoteStorageError as e:  # a plugin's blob that looks like a malformed redirect or mark
        log.warning("compaction_mark_left_out", clean_end=clean_end, max_bytes=max_bytes, reason=str(e))
        return custom
    try:
        manifest = integrity.decode(custom)
        if manifest is not None:
            room = max_bytes - compaction_mark.overhead(clean_end)
            return compaction_mark.encode(clean_end, integrity.encode(manifest, room), max_bytes)
    except RemoteStorageError as e:  # too large even without the location
        why = str(e)
    log.warning("compaction_mark_left_out", clean_end=clean_end, max_bytes=max_bytes, reason=why)
    return custom
