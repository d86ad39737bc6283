"""The embedded file metadata store, followed read-only, with a switch that takes it "down":
while :attr:`ControlledFileRemoteLogMetadataManager.down` is set every lookup raises the retriable
:class:`MetadataUnavailableError`, as the topic store does while the broker is unreachable.

(The name ends like the built-in class so the read side opens it read-only, as it does the real one.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from rlm.errors import MetadataUnavailableError
from rlm.types import RemoteLogSegmentMetadata, TopicIdPartition
from rlmm.file import FileRemoteLogMetadataManager


class ControlledFileRemoteLogMetadataManager(FileRemoteLogMetadataManager):
    down: ClassVar[bool] = False

    def _check(self) -> None:
        if type(self).down:
            raise MetadataUnavailableError("injected: remote log metadata unreachable")

    def known_partitions(self) -> set[TopicIdPartition]:
        self._check()
        return super().known_partitions()

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        self._check()
        return super().list_remote_log_segments(tp, leader_epoch)
