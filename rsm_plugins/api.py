"""The storage plugin interface: Apache Kafka's ``RemoteStorageManager`` in Python names.

Value types and errors are defined once in :mod:`rlm.types` and :mod:`rlm.errors` (shared with
``rlmm``, the daemon and the fetcher); they are re-exported here, with what a plugin author needs
to write a plugin (:class:`PluginConfig`, :func:`parse_config`, :func:`check_range`), so that one
import serves: the built-in plugins import through this module as third-party plugins do.
Every method raises only :class:`RemoteStorageError` (or a subclass); SDK errors are translated
at the plugin edge so retry loops can look at ``retriable`` alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar, Generic

from typing_extensions import TypeVar

from rlm.errors import (
    ChunkIntegrityError,
    ConfigError,
    DataKeyError,
    PluginLoadError,
    ReadOnlyStorageError,
    RemoteObjectFormatError,
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageIntegrityError,
)
from rlm.secrets import is_secret_key
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

from . import streams
from .config import PluginConfig, normalize_keys, parse_config
from .listing import StoredObject
from .redirect import stored_partition
from .streams import check_range

if TYPE_CHECKING:
    from .integrity import Crc32c
    from .layout import SourceFile

#: how much of a file source :meth:`RemoteStorageManager.write_source` reads at a time
_SOURCE_PIECE = 4 << 20

__all__ = [
    "ChunkIntegrityError",
    "ConfigError",
    "DataKeyError",
    "IndexType",
    "KafkaUuid",
    "LogSegmentData",
    "PluginConfig",
    "PluginLoadError",
    "ReadOnlyStorageError",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentState",
    "RemoteObjectFormatError",
    "RemoteRangeError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageIntegrityError",
    "RemoteStorageManager",
    "StoredObject",
    "TopicIdPartition",
    "TopicPartition",
    "check_range",
    "is_secret_key",
    "normalize_keys",
    "parse_config",
    "stored_partition",
]

C = TypeVar("C", bound=PluginConfig, default=PluginConfig)


class RemoteStorageManager(ABC, Generic[C]):
    """Stores the files of rolled Kafka segments in a remote tier and reads them back.

    Lifecycle: construct with no arguments, :meth:`configure` once, use from many threads,
    :meth:`close`. What every plugin needs lives here, so a plugin writes only its storage code:

    - **configuration**: set :attr:`config_model` to a :class:`PluginConfig` subclass;
      :meth:`configure` validates the block with it (every problem reported at once, under the
      keys as written; ``broker.id`` accepted and ignored), keeps it as :attr:`config` and calls
      :meth:`on_configure` for the plugin's own set-up;
    - **the guard**: :attr:`config` raises :class:`RemoteStorageError` before ``configure()``;
    - **pickling** (Spark executors receive plugins): the instance is rebuilt with ``cls()`` and
      its attributes restored, except those named in :attr:`transient_attributes` (clients,
      pools, locks, thread-locals), which ``__init__`` creates afresh and which are re-created
      lazily.
    """

    #: Short name used in logs and messages, and by :func:`rsm_plugins.load` for built-ins.
    plugin_name: ClassVar[str] = ""
    #: The pydantic model of the plugin's configuration block.
    config_model: ClassVar[type[PluginConfig]] = PluginConfig
    #: Attributes not pickled: cached clients, pools, locks (``__init__`` re-creates them).
    transient_attributes: ClassVar[frozenset[str]] = frozenset()
    #: A layout this plugin only reads (storage a broker's own tiered storage owns): ``rlm run``
    #: refuses to start on it, and copy/delete raise :class:`ReadOnlyStorageError`.
    read_only: ClassVar[bool] = False

    _config: C | None = None

    def configure(self, config: Mapping[str, Any]) -> None:
        """Validate and apply the plugin's configuration (Kafka's ``rsm.config.*`` with the prefix
        stripped, plus ``broker.id``). Raises :class:`ConfigError` naming every bad key; secret
        values never appear in messages or logs. Override :meth:`on_configure`, not this."""
        cfg: Any = parse_config(self.config_model, config, self.display_name)
        self._config = cfg
        try:
            self.on_configure(cfg)
        except BaseException:
            self._config = None
            raise

    def on_configure(self, config: C) -> None:
        """The plugin's own set-up once its configuration is valid (create a root directory, log
        ``rsm_configured``). Raise :class:`ConfigError` when the configuration cannot work."""

    @property
    def config(self) -> C:
        """The validated configuration; :class:`RemoteStorageError` before :meth:`configure`."""
        if self._config is None:
            raise RemoteStorageError(f"{self.display_name} storage plugin used before configure()")
        return self._config

    @property
    def display_name(self) -> str:
        return self.plugin_name or type(self).__qualname__

    def __reduce__(self) -> tuple[Any, ...]:
        state = {k: v for k, v in self.__dict__.items() if k not in self.transient_attributes}
        return (_new_instance, (type(self),), state)

    def close(self) -> None:
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

    def read_log_segment_range(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int
    ) -> bytes:
        """Bytes ``start_position..end_position`` (both **inclusive**, end clamped to the object)
        of the ``.log`` file as one ``bytes``: how the read core fetches its chunks. Range and
        error rules as :meth:`fetch_log_segment`, whose stream the default reads. A plugin
        overrides it when it can fill the result with fewer copies (the ``s3`` plugin reads the
        socket straight into it); the result must be what :meth:`fetch_log_segment` streams."""
        with self.fetch_log_segment(metadata, start_position, end_position) as stream:
            data = streams.read_exactly(stream, end_position - start_position + 1)
            if stream.read(1):  # reaching the end is what checks a whole file's checksum
                raise RemoteStorageError(
                    f"{self.display_name}: segment {metadata.remote_log_segment_id} streamed more than "
                    f"the {end_position - start_position + 1} bytes asked at position {start_position}")
            return data

    @abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        """Stream a whole auxiliary file of the segment. A segment copied without a transaction
        index raises :class:`RemoteResourceNotFoundError` for ``IndexType.TRANSACTION``, as does
        any file of a missing segment. The caller closes the stream."""

    @abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every file of the segment. Idempotent: deleting twice, or a segment that was
        never copied, is not an error."""

    def list_segment_objects(self, tp: TopicIdPartition) -> list[StoredObject] | None:
        """Every object stored under the partition's directory or prefix, or ``None`` when the
        plugin cannot list (the default): ``rlm verify`` then says orphans were not checked.
        Raises :class:`RemoteStorageError` when the store cannot be listed."""
        return None

    # ---- optional: objects by key (layouts written by other plugins, see rsm_plugins.aiven) ----
    def open_object(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        """Stream bytes ``start..end`` (both **inclusive**, ``None`` = to the end) of the object at
        ``key``, a ``/``-separated name relative to the plugin's root (directory, bucket + prefix,
        URL). This is how a storage layout that this plugin did not write (Aiven's) is read over
        the plugin's storage, client and credentials. Range rules as :meth:`fetch_log_segment`;
        a missing object raises :class:`RemoteResourceNotFoundError`. The default cannot: it
        raises :class:`RemoteStorageError`."""
        raise RemoteStorageError(f"the {self.display_name} storage plugin cannot read objects by key")

    def object_size(self, key: str) -> int:
        """The size of the object at ``key`` (see :meth:`open_object`);
        :class:`RemoteResourceNotFoundError` when it does not exist."""
        raise RemoteStorageError(f"the {self.display_name} storage plugin cannot read objects by key")

    def list_objects(self, prefix: str) -> list[StoredObject] | None:
        """The objects directly under ``prefix`` (a key ending in ``/``, see :meth:`open_object`),
        keys relative to the plugin's root, or ``None`` when the plugin cannot list (the default).
        A prefix with nothing under it is an empty list. Raises :class:`RemoteStorageError`."""
        return None

    def list_prefixes(self, prefix: str) -> list[str] | None:
        """The names of the "directories" directly under ``prefix`` (a key ending in ``/``, or
        ``""`` for the root), or ``None`` when the plugin cannot list (the default). For layouts
        read by key whose partitions must be discovered (``aiven``'s metadata rebuild)."""
        return None

    def verify_segment(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        """Layout checks of one finished segment beyond its whole-file reads, for ``rlm verify``:
        each string describes one inconsistency (a layout's manifest against its objects). The
        default has none to make. Raises :class:`RemoteStorageError` when the segment cannot be
        examined (a missing object is :class:`RemoteResourceNotFoundError`)."""
        return []

    # ---- optional: the published log start offset (see rsm_plugins.log_start) ----------------
    def write_log_start_offset(self, tp: TopicIdPartition, log_start_offset: int) -> bool:
        """Store the partition's log start offset (``DeleteRecords`` and remote-retention bound)
        for readers that have neither a log dir nor a broker; atomically: a reader sees the old
        or the new value. Returns ``False`` when the plugin cannot store it (the default): such
        readers then bound reads by remote metadata alone. Raises :class:`RemoteStorageError`."""
        return False

    def read_log_start_offset(self, tp: TopicIdPartition) -> int | None:
        """The value stored by :meth:`write_log_start_offset`, ``None`` when none was stored or the
        plugin cannot store one (the default). A stored object that cannot be decoded raises
        :class:`RemoteStorageIntegrityError` (see :mod:`rsm_plugins.log_start` for why)."""
        return None

    def delete_log_start_offset(self, tp: TopicIdPartition) -> None:
        """Remove the stored value (the partition was deleted). Idempotent; the default does
        nothing. Raises :class:`RemoteStorageError`."""

    # ---- optional: self-describing segments (see rsm_plugins.descriptor) ----------------------
    def write_segment_descriptor(self, metadata: RemoteLogSegmentMetadata, data: bytes) -> bool:
        """Store the segment's descriptor (its own metadata, :mod:`rsm_plugins.descriptor`) beside
        its files, atomically; called after :meth:`copy_log_segment_data` and before the segment
        is COPY_SEGMENT_FINISHED. Idempotent (overwrites). Returns ``False`` when the plugin cannot
        store one (the default): ``rlm metadata rebuild`` then rebuilds the segment's metadata from
        its files. Raises :class:`RemoteStorageError`."""
        return False

    def read_segment_descriptor(self, metadata: RemoteLogSegmentMetadata) -> bytes | None:
        """The bytes stored by :meth:`write_segment_descriptor` (located by the segment id, start
        offset and partition of ``metadata``), ``None`` when there is none or the plugin cannot
        store one (the default). Raises :class:`RemoteStorageError`."""
        return None

    def list_partitions(self) -> list[TopicIdPartition] | None:
        """Every partition with objects in the store (from the directory or prefix names alone),
        ``None`` when the plugin cannot list (the default): ``rlm metadata rebuild`` needs it.
        Raises :class:`RemoteStorageError` when the store cannot be listed."""
        return None

    def open_source(self, path: Path) -> BinaryIO:
        """Open one local file of a :class:`LogSegmentData` for reading.

        Plugins read their sources only through this method: it is the seam through which
        :class:`rsm_plugins.testing.FaultInjectingRSM` makes a copy fail part way through.
        """
        return open(path, "rb")

    def write_source(self, src: SourceFile, out: Any, crc: Crc32c, *,
                     copy: Callable[[BinaryIO], bool] | None = None) -> None:
        """``src``'s bytes written to ``out`` (anything with ``write``), their CRC-32C added to
        ``crc`` on the way: one pass over the bytes, the checksum computed while they are written,
        not read back. A file source is opened with :meth:`open_source` and copied in 4 MiB
        pieces unless ``copy`` (given the open source) copies it itself and returns ``True`` (the
        ``local`` plugin's kernel copy)."""
        if src.data is not None:
            out.write(src.data)
            crc.update(src.data)
            return
        if src.path is None:
            raise ValueError("a SourceFile has neither data nor a path")
        with self.open_source(src.path) as inp:
            if copy is not None and copy(inp):
                return
            while chunk := inp.read(_SOURCE_PIECE):
                out.write(chunk)
                crc.update(chunk)

    def __enter__(self) -> RemoteStorageManager[C]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _new_instance(cls: type[RemoteStorageManager[Any]]) -> RemoteStorageManager[Any]:
    """Unpickle, first step: a fresh instance (new clients, pools, locks); pickle then restores the
    pickled attributes over it (after memoizing it, so references back to the plugin work)."""
    return cls()
