"""A fault-injecting wrapper around any storage plugin, for tests of plugins and of their callers.

:class:`FaultInjectingRSM` delegates to a real plugin and can

* make the copy's read of one local source file fail after N bytes (through the plugin's
  :meth:`~rsm_plugins.api.RemoteStorageManager.open_source` seam), which breaks a copy in the
  middle, e.g. half way through a multipart upload;
* make the next calls of an operation raise a chosen error before reaching the plugin
  (e.g. a retriable error, to exercise a caller's retry loop);
* record every call and its outcome, like Kafka's ``LocalTieredStorageHistory``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from rlm.types import IndexType, LogSegmentData, RemoteLogSegmentMetadata, TopicIdPartition

from .api import RemoteStorageManager, StoredObject
from .layout import SegmentFileType

OPERATIONS = ("copy", "fetch_log_segment", "fetch_index", "delete", "write_descriptor")


@dataclass(frozen=True, slots=True)
class Call:
    """One recorded call: operation, segment id text, and the error's class name (None = success)."""

    operation: str
    segment_id: str
    error: str | None = None


class _FaultyReader:
    """A file that raises ``error`` once a read would pass byte ``fail_at`` (seeks are honoured)."""

    def __init__(self, inner: BinaryIO, fail_at: int, error: BaseException) -> None:
        self._inner = inner
        self._fail_at = fail_at
        self._error = error

    def read(self, n: int = -1) -> bytes:
        pos = self._inner.tell()
        if n < 0:  # reading to the end crosses the fault
            raise self._error
        if pos + n > self._fail_at:
            allowed = max(0, self._fail_at - pos)
            if allowed == 0:
                raise self._error
            return self._inner.read(allowed)  # a short read; the next one fails
        return self._inner.read(n)

    def readinto(self, b: bytearray | memoryview) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()

    def fileno(self) -> int:
        raise OSError("fault-injected stream has no file descriptor")

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> _FaultyReader:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class FaultInjectingRSM(RemoteStorageManager):
    """Wraps ``inner`` (already configured, or configured through this wrapper)."""

    plugin_name = "faults"

    def __init__(self, inner: RemoteStorageManager) -> None:
        self.inner = inner
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._op_faults: dict[str, list[BaseException]] = {}
        self._source_fault: tuple[SegmentFileType, int, BaseException] | None = None
        self._fault_paths: dict[Path, tuple[int, BaseException]] = {}
        self.inner.open_source = self._open_source  # type: ignore[method-assign]

    def __reduce__(self) -> tuple[Any, ...]:
        # the default protocol (not the base class's cls() rebuild): the wrapper needs its inner plugin
        return (_bare_instance, (type(self),), self.__getstate__())

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_lock")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self.inner.open_source = self._open_source  # type: ignore[method-assign]

    # ---- arming faults ----------------------------------------------------------------------
    def fail_source_read(
        self,
        file_type: SegmentFileType = SegmentFileType.SEGMENT,
        after_bytes: int = 0,
        error: BaseException | None = None,
    ) -> None:
        """Make the next copy fail while reading ``file_type`` from local disk, after ``after_bytes``."""
        if file_type is SegmentFileType.LEADER_EPOCH_CHECKPOINT:
            raise ValueError("the leader-epoch checkpoint is passed as bytes, not read from a file")
        with self._lock:
            self._source_fault = (
                file_type,
                after_bytes,
                error or OSError(f"injected fault reading {file_type.suffix} at byte {after_bytes}"),
            )

    def fail_next(self, operation: str, error: BaseException, times: int = 1) -> None:
        """Raise ``error`` for the next ``times`` calls of ``operation`` (one of :data:`OPERATIONS`)."""
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}, expected one of {OPERATIONS}")
        with self._lock:
            self._op_faults.setdefault(operation, []).extend([error] * times)

    def clear_faults(self) -> None:
        with self._lock:
            self._op_faults.clear()
            self._source_fault = None
            self._fault_paths.clear()

    def count(self, operation: str, *, failed: bool | None = None) -> int:
        with self._lock:
            return sum(
                1
                for c in self.calls
                if c.operation == operation and (failed is None or (c.error is not None) == failed)
            )

    # ---- plumbing ---------------------------------------------------------------------------
    def _open_source(self, path: Path) -> BinaryIO:
        f = open(path, "rb")  # noqa: SIM115 - returned to the plugin, which closes it
        with self._lock:
            fault = self._fault_paths.get(Path(path))
        if fault is None:
            return f
        return _FaultyReader(f, fault[0], fault[1])  # type: ignore[return-value]

    def _before(self, operation: str, md: RemoteLogSegmentMetadata) -> None:
        with self._lock:
            pending = self._op_faults.get(operation)
            error = pending.pop(0) if pending else None
        if error is not None:
            self._record(operation, md, error)
            raise error

    def _record(self, operation: str, md: RemoteLogSegmentMetadata, error: BaseException | None) -> None:
        with self._lock:
            self.calls.append(
                Call(
                    operation,
                    md.remote_log_segment_id.id.text,
                    type(error).__name__ if error is not None else None,
                )
            )

    # ---- RemoteStorageManager ---------------------------------------------------------------
    def configure(self, config: Mapping[str, Any]) -> None:
        self.inner.configure(config)

    def close(self) -> None:
        self.inner.close()

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        self._before("copy", metadata)
        with self._lock:
            armed, self._source_fault = self._source_fault, None
            if armed is not None:
                path = _source_path(segment_data, armed[0])
                if path is None:
                    raise ValueError(f"cannot inject a fault into absent {armed[0].suffix} file")
                self._fault_paths[Path(path)] = (armed[1], armed[2])
        try:
            result = self.inner.copy_log_segment_data(metadata, segment_data)
        except BaseException as e:
            self._record("copy", metadata, e)
            raise
        finally:
            if armed is not None:
                with self._lock:
                    self._fault_paths.clear()
        self._record("copy", metadata, None)
        return result

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        self._before("fetch_log_segment", metadata)
        try:
            out = self.inner.fetch_log_segment(metadata, start_position, end_position)
        except BaseException as e:
            self._record("fetch_log_segment", metadata, e)
            raise
        self._record("fetch_log_segment", metadata, None)
        return out

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        self._before("fetch_index", metadata)
        try:
            out = self.inner.fetch_index(metadata, index_type)
        except BaseException as e:
            self._record("fetch_index", metadata, e)
            raise
        self._record("fetch_index", metadata, None)
        return out

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._before("delete", metadata)
        try:
            self.inner.delete_log_segment_data(metadata)
        except BaseException as e:
            self._record("delete", metadata, e)
            raise
        self._record("delete", metadata, None)


    def write_segment_descriptor(self, metadata: RemoteLogSegmentMetadata, data: bytes) -> bool:
        self._before("write_descriptor", metadata)
        try:
            out = self.inner.write_segment_descriptor(metadata, data)
        except BaseException as e:
            self._record("write_descriptor", metadata, e)
            raise
        self._record("write_descriptor", metadata, None)
        return out

    def read_segment_descriptor(self, metadata: RemoteLogSegmentMetadata) -> bytes | None:
        return self.inner.read_segment_descriptor(metadata)

    def list_partitions(self) -> list[TopicIdPartition] | None:
        return self.inner.list_partitions()

    def list_segment_objects(self, tp: TopicIdPartition) -> list[StoredObject] | None:
        return self.inner.list_segment_objects(tp)

    def write_log_start_offset(self, tp: TopicIdPartition, log_start_offset: int) -> bool:
        return self.inner.write_log_start_offset(tp, log_start_offset)  # passed through, no faults

    def read_log_start_offset(self, tp: TopicIdPartition) -> int | None:
        return self.inner.read_log_start_offset(tp)

    def delete_log_start_offset(self, tp: TopicIdPartition) -> None:
        self.inner.delete_log_start_offset(tp)

def _source_path(data: LogSegmentData, file_type: SegmentFileType) -> Path | None:
    return {
        SegmentFileType.SEGMENT: data.log_segment,
        SegmentFileType.OFFSET_INDEX: data.offset_index,
        SegmentFileType.TIME_INDEX: data.time_index,
        SegmentFileType.TRANSACTION_INDEX: data.transaction_index,
        SegmentFileType.PRODUCER_SNAPSHOT: data.producer_snapshot_index,
    }.get(file_type)


def _bare_instance(cls: type[FaultInjectingRSM]) -> FaultInjectingRSM:
    """Unpickle, first step: an uninitialised wrapper; ``__setstate__`` fills it."""
    return cls.__new__(cls)
