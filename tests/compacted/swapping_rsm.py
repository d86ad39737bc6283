"""A storage plugin for the cleaner-swap test: the ``local`` plugin that, once, swaps a cleaned
segment into the broker's partition directory (as Kafka's cleaner renames ``.swap`` files to
``.log``) at the start of a copy, before reading the files it was given.

``<root>/.swap-on-copy`` (JSON: ``pdir``, ``cleaned``) arms it; it is removed when the swap is done.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlm.daemon.probes import PROBE_TOPIC
from rlm.types import LogSegmentData, RemoteLogSegmentMetadata
from rsm_plugins.local import LocalRemoteStorageManager

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


def swap_in(cleaned: Path, pdir: Path) -> None:
    """Replace ``pdir``'s segment files by ``cleaned``'s, each by a rename (new inodes)."""
    for f in pdir.iterdir():
        if f.suffix in SEGMENT_SUFFIXES and not (cleaned / f.name).exists():
            f.unlink()
    for f in cleaned.iterdir():
        if f.suffix in SEGMENT_SUFFIXES:
            tmp = pdir / f"{f.name}.swap"
            tmp.write_bytes(f.read_bytes())
            os.replace(tmp, pdir / f.name)


class SwappingLocalRSM(LocalRemoteStorageManager):
    plugin_name = "swapping-local"

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        marker = self.root / ".swap-on-copy"
        if metadata.topic_id_partition.topic != PROBE_TOPIC and marker.exists():
            spec = json.loads(marker.read_text())
            swap_in(Path(spec["cleaned"]), Path(spec["pdir"]))
            marker.unlink()
        return super().copy_log_segment_data(metadata, segment_data)
