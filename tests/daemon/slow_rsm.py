"""A storage plugin for signal tests: the ``local`` plugin whose copies hang until the process dies.

Entering a copy (of anything but the preflight's probe segment) touches ``<root>/.copy-started``
so a test knows a copy is under way; closing the plugin touches ``<root>/.closed`` so a test knows
the daemon closed it.
"""

from __future__ import annotations

import time

from rlm.daemon.probes import PROBE_TOPIC
from rlm.types import LogSegmentData, RemoteLogSegmentMetadata
from rsm_plugins.local import LocalRemoteStorageManager


class HangingLocalRSM(LocalRemoteStorageManager):
    plugin_name = "hanging-local"

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        if metadata.topic_id_partition.topic == PROBE_TOPIC:  # let the start-up preflight through
            return super().copy_log_segment_data(metadata, segment_data)
        (self.root / ".copy-started").touch()
        time.sleep(3600)
        return super().copy_log_segment_data(metadata, segment_data)

    def close(self) -> None:
        (self.root / ".closed").touch()
        super().close()


class BigCustomMetadataRSM(LocalRemoteStorageManager):
    """Returns more custom metadata than ``remote.log.metadata.custom.metadata.max.bytes`` allows."""

    plugin_name = "big-custom-metadata"

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        super().copy_log_segment_data(metadata, segment_data)
        return b"x" * 200
