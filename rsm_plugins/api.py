"""The storage plugin interface: Apache Kafka's ``RemoteStorageManager`` in Python names.

Value types and errors are defined once in :mod:`rlm.types` and :mod:`rlm.errors` (shared with
``rlmm``, the daemon and the fetcher); they are re-exported here so that a plugin author needs
one import. Every method raises only :class:`RemoteStorageError` (or a subclass); SDK errors are
translated at the plugin edge so retry loops can look at ``retriable`` alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, ClassVar

from rlm.errors import (
    ConfigError,
    PluginLoadError,
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageIntegrityError,
)
from rlm.types import (
    IndexType,
    KafkaUuid,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    TopicPartition,
)

__all__ = [
    "ConfigError",
    "IndexType",
    "KafkaUuid",
    "LogSegmentData",
    "PluginLoadError",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentState",
    "RemoteRangeError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageIntegrityError",
    "RemoteStorageManager",
    "TopicIdPartition",
    "TopicPartition",
]


class RemoteStorageManager(ABC):
    """Stores the files of rolled Kafka segments in a remote tier and reads them back.

    Lifecycle: construct with no arguments, :meth:`configure` once, use from many threads,
    :meth:`close`. Instances must be picklable (Spark executors receive them): drop cached
    clients, pools and connections in ``__getstate__`` and re-create them lazily.
    """

    #: Short name used in logs and by :func:`rsm_plugins.load` for built-ins.
    plugin_name: ClassVar[str] = ""

    @abstractmethod
    def configure(self, config: Mapping[str, Any]) -> None:
        """Validate and apply the plugin's configuration (Kafka's ``rsm.config.*`` with the prefix
        stripped, plus ``broker.id``). Raises :class:`ConfigError` naming the bad key; secret values
        never appear in messages or logs."""

    def close(self) -> None:  # noqa: B027 - optional hook, most plugins have nothing to release
        """Release clients and pools. Idempotent; the default does nothing."""

    @abstractmethod
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        """Upload the ``.log`` file, offset index, time index, transaction index (if any),
        producer snapshot and leader-epoch checkpoint bytes of one segment.

        Returns optional custom metadata (KIP-917) that the caller stores in the segment's
        metadata record and passes back on every fetch; keep it within
        ``remote.log.metadata.custom.metadata.max.bytes`` (128 by default).

        Idempotent: copying the same segment id again overwrites. All or nothing from a reader's
        point of view: if it raises, a later fetch of this segment raises
        :class:`RemoteResourceNotFoundError` (partial uploads are removed or never made visible).
        Raises :class:`RemoteStorageError`, ``retriable`` when trying again may help.
        """

    @abstractmethod
    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        """Stream bytes ``start_position..end_position`` of the ``.log`` file, both **inclusive**.

        ``end_position=None`` means to the end of the file; an end past the end of the object
        is clamped to it (as Kafka does). A negative start, an end before the start, or a start
        at or past the end of a non-empty object raises :class:`RemoteRangeError`. A missing
        segment raises :class:`RemoteResourceNotFoundError`. The caller closes the stream.
        """

    @abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        """Stream a whole auxiliary file of the segment. A segment copied without a transaction
        index raises :class:`RemoteResourceNotFoundError` for ``IndexType.TRANSACTION``, as does
        any file of a missing segment. The caller closes the stream."""

    @abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every file of the segment. Idempotent: deleting twice, or a segment that was
        never copied, is not an error."""

    def open_source(self, path: Path) -> BinaryIO:
        """Open one local file of a :class:`LogSegmentData` for reading.

        Plugins read their sources only through this method: it is the seam through which
        :class:`rsm_plugins.testing.FaultInjectingRSM` makes a copy fail part way through.
        """
        return open(path, "rb")

    def __enter__(self) -> RemoteStorageManager:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
