"""A storage plugin for signal tests: the ``local`` plugin whose copies hang until the process dies.

Entering a copy touches ``<root>/.copy-started`` so a test knows a copy is under way; closing
the plugin touches ``<root>/.closed`` so a test knows the daemon closed it.
"""

from __future__ import annotations

import time

from rlm.types import LogSegmentData, RemoteLogSegmentMetadata
from rsm_plugins.local import LocalRemoteStorageManager


class HangingLocalRSM(LocalRemoteStorageManager):
    plugin_name = "hanging-local"

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
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
