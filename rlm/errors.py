"""The project's one error tree.

Every error raised on purpose derives from :class:`RlmError`. Retry loops look only at the
``retriable`` flag, never at concrete classes, so a plugin can mark its own errors retriable
without the daemon knowing about them. SDK errors are translated at the plugin edge with
``raise ... from e``.
"""

from __future__ import annotations

from pathlib import Path


class RlmError(Exception):
    """Root of every error this project raises on purpose."""

    retriable: bool = False

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


class ConfigError(RlmError):
    """Configuration is missing, unknown or invalid; the message names the key."""


class InvalidNameError(ConfigError, ValueError):
    """A topic name (from config, metadata or storage) is not a legal Kafka topic name, so it
    must not become part of a path or key: ``../x``, ``a/b``, an absolute path or a NUL would
    escape the storage root, the work dir or the cache. Also a ``ValueError`` for parsers."""


class PluginLoadError(RlmError):
    """A plugin could not be found or imported; the message says what to install."""


# ---- on-disk formats (rlm.log) ---------------------------------------------------------------
class LogFormatError(RlmError):
    """A Kafka file (segment, index, snapshot, checkpoint) is corrupt, truncated or unsupported.

    ``path`` and ``position`` (byte offset in that file) say where; ``str()`` gives
    ``"<path>: <position>: <reason>"`` so CLIs can print it as one line.
    """

    def __init__(self, reason: str, *, path: str | Path | None = None, position: int | None = None) -> None:
        self.reason = reason
        self.path = str(path) if path is not None else "<bytes>"
        self.position = position
        where = f"{self.path}: {position if position is not None else '-'}"
        super().__init__(f"{where}: {reason}")


class CorruptRecordError(LogFormatError):
    """A record batch or message fails a structural check (sizes, varints, record count)."""


class CrcMismatchError(CorruptRecordError):
    """A batch, message or snapshot CRC does not match its content."""


class CompressionError(CorruptRecordError):
    """A compressed payload cannot be decoded with its declared codec."""


class DecompressedSizeError(CompressionError):
    """A compressed payload inflates beyond the decompression cap (a "bomb", or a batch far larger
    than any broker accepts); decoding stops at the cap so memory stays bounded."""


class IndexFormatError(LogFormatError):
    """An index file (.index, .timeindex, .txnindex) is malformed."""


class CheckpointFormatError(LogFormatError):
    """A text checkpoint/metadata file (leader-epoch-checkpoint, partition.metadata, ...) is malformed."""


class SnapshotFormatError(LogFormatError):
    """A producer-state snapshot is malformed or fails its CRC."""


class LogFileGoneError(LogFormatError):
    """A file of a partition directory vanished while being read (retention, the cleaner,
    truncation or partition deletion): the caller should treat that segment as gone."""


# ---- remote storage (rsm_plugins) ------------------------------------------------------------
class RemoteStorageError(RlmError):
    """A remote storage operation failed. ``retriable`` says whether trying again may help."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The remote object (segment, index) does not exist."""


class RemoteStorageIntegrityError(RemoteStorageError):
    """Data read back from remote storage does not match the checksum recorded at copy time."""


class RemoteRangeError(RemoteStorageError):
    """A byte range asked of a remote object is invalid (negative, reversed, or starts past its end)."""


class RemoteObjectFormatError(RemoteStorageIntegrityError):
    """A remote object written by another tiered-storage implementation cannot be understood: a
    manifest of an unknown version, a chunk index whose sizes disagree with the object, a chunk
    that does not decompress to its size. Never retriable: the bytes will not change."""


class ChunkIntegrityError(RemoteStorageIntegrityError):
    """An encrypted chunk failed authentication (AES-GCM tag) or is too short to hold one: the
    object was altered or the wrong data key was used. Names the object and the chunk so an
    operator can find the damaged bytes."""

    def __init__(self, message: str, *, object_key: str = "", chunk: int = -1) -> None:
        super().__init__(message)
        self.object_key = object_key
        self.chunk = chunk


class DataKeyError(RemoteStorageError):
    """A segment's wrapped data key cannot be unwrapped: its key-pair id is not configured, or the
    configured private key is not the one it was wrapped with. Configuration, not data: fixing
    the key ring fixes the read, so it is not retriable by itself."""


class ReadOnlyStorageError(RemoteStorageError):
    """A write (copy, delete, log-start publication) was asked of a read-only storage layout,
    such as the objects a broker's own tiered storage owns."""


# ---- remote log metadata (rlmm) --------------------------------------------------------------
class RemoteLogMetadataError(RlmError):
    """A metadata manager operation failed."""


class InvalidStateTransitionError(RemoteLogMetadataError):
    """A segment or partition state change that Kafka's state machine forbids; nothing was changed."""


class RemoteLogSegmentNotFoundError(RemoteLogMetadataError):
    """An update names a segment the metadata manager does not know."""


class MetadataTimeoutError(RemoteLogMetadataError):
    """A write was not confirmed durable and visible in time; it may or may not have happened."""

    retriable = True


class MetadataUnavailableError(RemoteLogMetadataError):
    """The metadata store (Kafka cluster, file store) cannot be reached right now."""

    retriable = True


class MetadataDecodeError(RemoteLogMetadataError):
    """A metadata record cannot be decoded. Names the metadata partition and offset when known."""

    def __init__(
        self,
        reason: str,
        *,
        partition: int | None = None,
        offset: int | None = None,
        source: str | None = None,
    ) -> None:
        self.reason = reason
        self.partition = partition
        self.offset = offset
        where = source or "__remote_log_metadata"
        if partition is not None:
            where += f"-{partition}"
        if offset is not None:
            where += f"@{offset}"
        super().__init__(f"{where}: {reason}")


# ---- read side (fetcher) ---------------------------------------------------------------------
class RemoteReadError(RlmError):
    """A historical read (fetch, offset lookup, scan) could not be served. Names the partition."""


class UnknownTopicOrPartitionError(RemoteReadError):
    """No remote data is known for this topic or partition."""


class OffsetOutOfRangeError(RemoteReadError):
    """The offset lies outside the remote range; ``log_start``..``log_end`` (exclusive end) is the
    valid range, so callers (HTTP 416, Kafka OFFSET_OUT_OF_RANGE) can report it."""

    def __init__(self, message: str, *, log_start: int, log_end: int) -> None:
        super().__init__(message)
        self.log_start = log_start
        self.log_end = log_end


class FencedLeaderEpochError(RemoteReadError):
    """The read names a leader epoch that ended before the requested offset (the log diverged)."""


class UnknownLeaderEpochError(RemoteReadError):
    """The read names a leader epoch newer than any in remote metadata."""

    retriable = True


class ReaderBusyError(RemoteReadError):
    """The remote reader pool's queue is full (``remote.log.reader.max.pending.tasks``)."""

    retriable = True


class FetchTimeoutError(RemoteReadError):
    """A remote read did not finish within its timeout (``remote.fetch.max.wait.ms`` or the caller's)."""

    retriable = True


class RemoteSegmentIncompleteError(RemoteStorageIntegrityError):
    """A remote segment's bytes end before the end offset or size its metadata records: a read is
    complete or it is this error, never silently fewer records."""


class RemoteSegmentDeletedError(RemoteReadError):
    """The segment chosen for a read was deleted from remote storage meanwhile (retention)."""

    retriable = True


# ---- the daemon's dependencies and start-up checks ----------------------------------------------
class IcebergTableError(RlmError):
    """``rlm iceberg``: the table cannot be kept in step (it belongs to another topic id, or
    commits kept conflicting past ``iceberg.commit_retries``)."""


class DependencyUnavailableError(RlmError):
    """Remote storage, the metadata store or the Kafka cluster did not answer a check (or in time)."""

    retriable = True


class KafkaAuthenticationError(DependencyUnavailableError):
    """The Kafka cluster refused the configured login (SASL or TLS): trying again with the same
    ``kafka_client`` settings cannot help, so it is not retriable. The message carries the
    client library's reason, never the credentials."""

    retriable = False


class ProbeTimeoutError(DependencyUnavailableError):
    """A bounded call did not return within its timeout; the call itself may still be running."""


class InstanceLockedError(RlmError):
    """Another ``rlm run`` already holds this work dir or log dir (two sidecars on one node by
    mistake); the message names the path and, when known, the holder's pid. Nothing was written."""


class WorkDirError(RlmError):
    """The daemon's own work dir cannot be written (the file system is full: ENOSPC, over quota,
    read-only, I/O error). Names the path and the errno. The previous file is left intact and the
    write is retried on the next run, so nothing stored is lost."""

    retriable = True

    def __init__(self, message: str, *, path: str | Path, errno_name: str) -> None:
        self.path = str(path)
        self.errno_name = errno_name
        super().__init__(f"{self.path}: {errno_name}: {message}")


class PreflightError(RlmError):
    """A start-up check failed; the message is one line naming the setting to fix."""
