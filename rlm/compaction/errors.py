"""Errors of remote compaction, in the project's one error tree (:class:`rlm.errors.RlmError`)."""

from __future__ import annotations

from rlm.errors import RlmError

__all__ = ["CompactionError", "InvalidCompactionInput", "OffsetMapTooSmall"]


class CompactionError(RlmError):
    """Remote compaction could not produce a segment; the message says which input and why."""


class InvalidCompactionInput(CompactionError, ValueError):
    """The input cannot be compacted as given: segments out of order or overlapping, a legacy
    (magic 0/1) batch, a non-binary key column, a setting out of range. Also a ``ValueError``."""


class OffsetMapTooSmall(CompactionError):
    """The offset map's memory holds no key at all (Kafka's cleaner refuses the same way:
    ``log.cleaner.dedupe.buffer.size`` too small)."""
