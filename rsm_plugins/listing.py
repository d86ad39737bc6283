"""What a plugin's partition listing returns: one stored object, with the segment it belongs to.

``rlm verify`` compares listings with remote metadata to find orphans (objects no metadata
names, e.g. index files left by a crash mid-copy). File names follow
:func:`rsm_plugins.layout.segment_file_name` in both layouts, so one parser serves every plugin;
a temporary file of an interrupted write (``<name>.<suffix>.<random>.tmp``) belongs to its segment
with ``file_type=None``; a name that does not parse at all keeps ``segment_id=None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .layout import SegmentFileType

_NAME = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})(\.[a-z_]+)(\..*)?$")
_SUFFIXES = {ft.suffix: ft for ft in SegmentFileType}


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One object under a partition's directory or prefix."""

    key: str
    """Full path or object key, as the plugin names it (shown to the operator)."""
    size: int
    modified_ms: int
    """Last-modified time (epoch ms), for grace periods."""
    segment_id: str | None = None
    """Kafka's base64 text of the segment id, ``None`` when the name is not a segment file."""
    start_offset: int | None = None
    file_type: SegmentFileType | None = None
    """``None`` for a temporary file (or a name that is not a segment file)."""


def parse_name(key: str, size: int, modified_ms: int) -> StoredObject:
    """A :class:`StoredObject` for ``key``, with the segment fields filled when its base name is
    ``<20-digit start offset>-<segment id><suffix>``."""
    base = key.rstrip("/").rsplit("/", 1)[-1]
    m = _NAME.match(base)
    if m is None or m.group(3) not in _SUFFIXES:
        return StoredObject(key, size, modified_ms)
    ft = _SUFFIXES[m.group(3)] if m.group(4) is None else None
    return StoredObject(key, size, modified_ms, m.group(2), int(m.group(1)), ft)
