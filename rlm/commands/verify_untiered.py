"""``rlm verify``'s check of what is *not* in remote storage: a partition the configuration asks to
tier (the sidecar's own per-topic ``remote.storage.enable``) whose log dir holds rolled segments
while the metadata store has no finished segment of it at all (``not_tiered``).

Why: the other checks walk the metadata store, so a partition the daemon never tiered (beside
Kafka 2.8, a ZooKeeper-era folder without ``partition.metadata`` used to be skipped without a
word) was invisible to them, and ``rlm verify --deep`` said clean while the broker's retention
deleted data that existed nowhere else (issue 40).
"""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

from rlm.errors import RlmError

from .verify_checks import Problem

if TYPE_CHECKING:
    from rlm.config import DaemonConfig
    from rlm.types import TopicPartition


def untiered_problems(config: DaemonConfig, tiered: Set[TopicPartition], topic: str | None) -> list[Problem]:
    """``not_tiered`` for each enabled partition of the configured log dirs with a rolled segment
    (one the broker will not write again) and no finished segment in ``tiered``."""
    if not config.log_dirs:
        return []
    # the daemon's discovery and the log reader load when a log dir is checked, not for `rlm --help`
    from rlm.daemon.compacted import cleaner_checkpoint, is_compact_only
    from rlm.daemon.discovery import TieringPolicy, scan_log_dirs
    from rlm.log.partition import PartitionDir

    policy = TieringPolicy(config)
    out = []
    for tp, found in sorted(scan_log_dirs(list(config.log_dirs)).partitions.items()):
        if topic not in (None, tp.topic) or tp in tiered:
            continue
        if not policy.is_tiered(tp.topic, policy.topic_config(tp.topic, None)):
            continue
        try:
            pdir = PartitionDir(found.dir)
            rolled = pdir.inactive_segments()
            if is_compact_only(policy.topic_config(tp.topic, None).cleanup_policy):
                # tiered only once the broker's cleaner has finished with them
                done = cleaner_checkpoint(found.dir, tp) or 0
                rolled = [s for s in rolled if pdir.next_offset(s) <= done]
        except (RlmError, OSError, ValueError):  # being deleted or rewritten by the broker
            continue
        if rolled:
            name = f"{tp.topic}-{tp.partition}"
            out.append(
                Problem(
                    name,
                    "not_tiered",
                    f"{len(rolled)} rolled segment(s) in {found.dir} (from offset {rolled[0].base_offset}) "
                    "and nothing in remote storage: the daemon has not tiered this partition "
                    "(see `rlm status`)",
                )
            )
    return out
