"""Remote compaction: Kafka's log-cleaner semantics over a range of segments, into one new segment.

A pure library on top of :mod:`rlm.log` (the layers contract in ``pyproject.toml``): the daemon
gives it segment files, the aborted transactions, the producers' state and the keys written after
the range; it returns one compacted segment with its indexes. See ``docs/compaction.md``.
"""

from rlm.compaction.digest import PROCESS_KEY, DigestKey, KeyDigests, digest_keys
from rlm.compaction.engine import CompactionInput, CompactionResult, compact, compact_to_batches
from rlm.compaction.errors import CompactionError, InvalidCompactionInput, OffsetMapTooSmall
from rlm.compaction.newer_keys import NewerKeys
from rlm.compaction.offset_map import BYTES_PER_SLOT, OffsetMap
from rlm.compaction.output import SegmentFiles, write_segment
from rlm.compaction.settings import CompactionSettings, is_due
from rlm.compaction.transactions import ProducerLast, last_batches_of_producers

__all__ = [
    "BYTES_PER_SLOT",
    "PROCESS_KEY",
    "CompactionError",
    "CompactionInput",
    "CompactionResult",
    "CompactionSettings",
    "DigestKey",
    "InvalidCompactionInput",
    "KeyDigests",
    "NewerKeys",
    "OffsetMap",
    "OffsetMapTooSmall",
    "ProducerLast",
    "SegmentFiles",
    "compact",
    "compact_to_batches",
    "digest_keys",
    "is_due",
    "last_batches_of_producers",
    "warm_kernels",
    "write_segment",
]


def warm_kernels() -> int:
    """Load the compiled kernels before the first compaction (:mod:`rlm.compaction.warmup`; imported
    here on call, so that ``python -m rlm.compaction.warmup`` runs the module only once)."""
    from rlm.compaction.warmup import warm_kernels as run

    return run()
