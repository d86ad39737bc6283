"""``local``: segments in a directory, laid out exactly like Kafka's ``LocalTieredStorage``.

``<root>/<topic>-<partition>-<topicId>/<20-digit start offset>-<segmentId>.{log,index,timeindex,
txnindex,leader_epoch_checkpoint,snapshot}``. A directory written by Kafka's own test plugin can
be read by this one and the other way round. ``root`` is the directory holding the partition
directories; Kafka's ``dir`` key (data under ``<dir>/kafka-tiered-storage``) is accepted too.

Each file is written to a temporary name in the same directory, fsynced and renamed, so it
appears complete or not at all; the ``.log`` file is renamed last, so a reader that sees it sees
the whole segment. The small files (indexes, snapshot, leader-epoch checkpoint) are written by
helper threads while the ``.log`` is copied: their fsyncs, one journal commit each, used to come
one after another before the ``.log`` copy began (~12 % of a 100 MB segment's copy on a loaded
machine, see docs/performance.md). A failed copy removes whatever it wrote.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import structlog
from pydantic import Field, model_validator

from . import integrity, layout, log_start, streams
from .api import (
    ConfigError,
    IndexType,
    LogSegmentData,
    PluginConfig,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    StoredObject,
    TopicIdPartition,
)
from .integrity import FileChecksum, LayoutCode, SegmentManifest
from .layout import SegmentFileType, SourceFile
from .listing import parse_name

log = structlog.get_logger(__name__)

KAFKA_ROOT_DIR_NAME = "kafka-tiered-storage"
_COPY_CHUNK = 8 << 20  # per copy_file_range call
_READBACK_CHUNK = 1 << 20  # stays in cache between the read and the checksum
_AUX_THREADS = 4  # small files of one segment written at once, beside its .log copy


class LocalConfig(PluginConfig):
    root: Path | None = Field(
        None, description="Directory that holds the <topic>-<partition>-<topicId> dirs."
    )
    dir: Path | None = Field(
        None, description="Kafka LocalTieredStorage's key: data under <dir>/kafka-tiered-storage."
    )
    fsync: bool = Field(True, description="fsync each file and the partition directory before returning.")
    delete_enable: bool = Field(True, description="False makes deletes no-ops (Kafka's delete.enable).")
    create_root: bool = Field(
        True, description="Create a missing root; false = a missing root is a configuration error "
        "(a reader of storage it does not own writes nothing)."
    )

    @model_validator(mode="after")
    def _one_root(self) -> LocalConfig:
        if (self.root is None) == (self.dir is None):
            raise ValueError("set exactly one of 'root' or 'dir'")
        return self

    @property
    def storage_dir(self) -> Path:
        if self.root is not None:
            return self.root
        assert self.dir is not None
        return self.dir / KAFKA_ROOT_DIR_NAME


class LocalRemoteStorageManager(RemoteStorageManager[LocalConfig]):
    """Remote tier in a local (or mounted network) directory."""

    plugin_name = "local"
    config_model = LocalConfig

    # ---- configuration ----------------------------------------------------------------------
    def on_configure(self, config: LocalConfig) -> None:
        if not config.create_root and not config.storage_dir.is_dir():
            raise ConfigError(f"local storage plugin: root {config.storage_dir} is not a directory "
                              "(create_root is false: it is not created)")
        try:
            config.storage_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"local storage plugin: cannot create root {config.storage_dir}: {e}") from e
        log.info("rsm_configured", plugin=self.plugin_name, root=str(config.storage_dir))

    @property
    def root(self) -> Path:
        return self.config.storage_dir

    def path_of(self, metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType) -> Path:
        return self.root / layout.kafka_relative_path(metadata, file_type)

    # ---- copy -------------------------------------------------------------------------------
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        cfg = self.config
        *aux, segment = layout.source_files(segment_data)  # the .log last: the commit marker
        final_log = self.path_of(metadata, SegmentFileType.SEGMENT)
        part_dir = final_log.parent
        sums: dict[SegmentFileType, FileChecksum] = {}
        try:
            part_dir.mkdir(parents=True, exist_ok=True)
            if segment_data.transaction_index is None:  # a stale one from an earlier copy of this id
                self.path_of(metadata, SegmentFileType.TRANSACTION_INDEX).unlink(missing_ok=True)
            # the small files in helper threads while this one copies the .log; leaving the block
            # waits for them all, so nothing of this copy is still being written when it is
            # committed (the .log renamed) or, on failure, removed
            with ThreadPoolExecutor(max(1, min(len(aux), _AUX_THREADS)), "local-aux") as pool:
                futures = {
                    src.file_type: pool.submit(self._write_atomic, src, self.path_of(metadata, src.file_type))
                    for src in aux
                }
                tmp_log = _tmp_name(final_log)
                try:
                    sums[SegmentFileType.SEGMENT] = self._write_tmp(segment, tmp_log)
                except BaseException:
                    tmp_log.unlink(missing_ok=True)
                    raise
            try:
                for ft, fut in futures.items():
                    sums[ft] = fut.result()
                os.replace(tmp_log, final_log)  # only once every other file is in place
            except BaseException:
                tmp_log.unlink(missing_ok=True)
                raise
            if cfg.fsync:
                _fsync_dir(part_dir)
        except Exception as e:
            self._remove(metadata)
            log.warning(
                "segment_copy_failed", plugin=self.plugin_name, error=str(e), **layout.describe(metadata)
            )
            if isinstance(e, RemoteStorageError):
                raise
            raise RemoteStorageError(
                f"copy of {metadata.remote_log_segment_id} to {part_dir} failed: {e}",
                retriable=isinstance(e, OSError),
            ) from e
        log.debug(
            "rsm_segment_written",
            plugin=self.plugin_name,
            bytes=sums[SegmentFileType.SEGMENT].size,
            **layout.describe(metadata),
        )
        if cfg.custom_metadata_max_bytes == 0:
            return None
        return integrity.encode(
            SegmentManifest(LayoutCode.KAFKA, sums, str(self.root)), cfg.custom_metadata_max_bytes
        )

    def _write_atomic(self, src: SourceFile, final: Path) -> FileChecksum:
        """``src`` written (fsynced when configured) to a temporary name and renamed to ``final``."""
        tmp = _tmp_name(final)
        try:
            checksum = self._write_tmp(src, tmp)
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return checksum

    def _write_tmp(self, src: SourceFile, tmp: Path) -> FileChecksum:
        """``src`` written to ``tmp`` (fsynced when configured); the CRC-32C of the bytes written."""
        crc = integrity.Crc32c()
        with open(tmp, "w+b") as out:

            def kernel_copy(inp: BinaryIO) -> bool:
                fd = _regular_file_fd(inp)
                return fd is not None and _kernel_copy(fd, out.fileno(), crc, self.config.fsync)

            self.write_source(src, out, crc, copy=kernel_copy)
            if self.config.fsync:
                out.flush()
                os.fsync(out.fileno())
        return crc.result()

    # ---- fetch ------------------------------------------------------------------------------
    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        return self._fetch(metadata, SegmentFileType.SEGMENT, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        return self._fetch(metadata, SegmentFileType.for_index(index_type), 0, None)

    def _fetch(
        self, metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType, start: int, end: int | None
    ) -> BinaryIO:
        path = self.path_of(metadata, file_type)
        what = str(path)
        if (
            file_type is not SegmentFileType.SEGMENT
            and not self.path_of(metadata, SegmentFileType.SEGMENT).exists()
        ):
            # the .log is the commit marker: indexes of an unfinished or failed copy are not there
            raise RemoteResourceNotFoundError(
                f"segment {metadata.remote_log_segment_id} not found: no {what} without its .log file"
            )
        return self._open_path(path, start, end, lambda: self._expected(metadata, file_type))

    def read_log_segment_range_into(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, out: memoryview
    ) -> int:
        """Bytes from ``start_position`` read into ``out`` (a scan's reused buffer: the read core's
        ``fetcher.read_ahead``) with ``preadv``; how many (``len(out)``, fewer only at the file's
        end). Why: the default path reads a new ``bytes`` per chunk, whose fresh pages cost more
        than copying the page cache's bytes into a buffer that is already mapped. Range, missing
        file and checksum rules as :meth:`fetch_log_segment`."""
        if not len(out):
            return 0
        path = self.path_of(metadata, SegmentFileType.SEGMENT)
        what = str(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"{what} not found") from e
        except OSError as e:
            raise RemoteStorageError(f"{what}: cannot open: {e}", retriable=True) from e
        try:
            size = os.fstat(fd).st_size
            begin, stop = streams.check_range(start_position, start_position + len(out) - 1, size, what)
            n = 0
            while n < stop - begin:
                got = os.preadv(fd, [out[n:stop - begin]], begin + n)
                if not got:  # shorter than at fstat: the caller's completeness check names it
                    break
                n += got
        except OSError as e:
            raise RemoteStorageError(f"{what}: cannot read at position {start_position}: {e}",
                                     retriable=True) from e
        finally:
            os.close(fd)
        if streams.covers_whole(begin, begin + n, size):
            streams.check_whole_read(out[:n], self._expected(metadata, SegmentFileType.SEGMENT), what)
        return n

    def _open_path(
        self, path: Path, start: int, end: int | None, expected_sum: Callable[[], FileChecksum | None]
    ) -> BinaryIO:
        what = str(path)
        try:
            f = open(path, "rb")  # noqa: SIM115 - handed to the caller inside the stream
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"{what} not found") from e
        except OSError as e:
            raise RemoteStorageError(f"{what}: cannot open: {e}", retriable=True) from e
        try:
            size = os.fstat(f.fileno()).st_size
            begin, stop = streams.check_range(start, end, size, what)
            expected = expected_sum() if streams.covers_whole(begin, stop, size) else None
            if begin:
                f.seek(begin)
            return streams.wrap(f, stop - begin, what=what, expected=expected)
        except BaseException:
            f.close()
            raise

    def open_object(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        return self._open_path(self.root / layout.checked_key(key), start, end, lambda: None)

    def object_size(self, key: str) -> int:
        path = self.root / layout.checked_key(key)
        try:
            return path.stat().st_size
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"{path} not found") from e
        except OSError as e:
            raise RemoteStorageError(f"{path}: cannot stat: {e}", retriable=True) from e

    def _expected(
        self, metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType
    ) -> FileChecksum | None:
        if not self.config.verify_checksums:
            return None
        manifest = integrity.decode(metadata.custom_metadata)
        return manifest.checksum(file_type) if manifest else None

    # ---- published log start offset (rsm_plugins.log_start) -------------------------------
    def log_start_path(self, tp: TopicIdPartition) -> Path:
        return self.root / layout.kafka_partition_dir(tp) / log_start.OBJECT_NAME

    def write_log_start_offset(self, tp: TopicIdPartition, log_start_offset: int) -> bool:
        final = self.log_start_path(tp)
        data = log_start.encode(tp, log_start_offset, int(time.time() * 1000))
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            self._write_atomic(SourceFile(SegmentFileType.SEGMENT, data=data), final)
            if self.config.fsync:
                _fsync_dir(final.parent)
        except OSError as e:
            raise RemoteStorageError(f"{final}: cannot write: {e}", retriable=True) from e
        return True

    def read_log_start_offset(self, tp: TopicIdPartition) -> int | None:
        path = self.log_start_path(tp)
        try:
            with open(path, "rb") as f:
                data = f.read(log_start.MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RemoteStorageError(f"{path}: cannot read: {e}", retriable=True) from e
        return log_start.decode(tp, data, str(path))

    def delete_log_start_offset(self, tp: TopicIdPartition) -> None:
        path = self.log_start_path(tp)
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            raise RemoteStorageError(f"{path}: cannot delete: {e}", retriable=True) from e

    # ---- segment descriptors (rsm_plugins.descriptor) --------------------------------------
    def write_segment_descriptor(self, metadata: RemoteLogSegmentMetadata, data: bytes) -> bool:
        final = self.path_of(metadata, SegmentFileType.DESCRIPTOR)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            self._write_atomic(SourceFile(SegmentFileType.DESCRIPTOR, data=data), final)
            if self.config.fsync:
                _fsync_dir(final.parent)
        except OSError as e:
            raise RemoteStorageError(f"{final}: cannot write: {e}", retriable=True) from e
        return True

    def read_segment_descriptor(self, metadata: RemoteLogSegmentMetadata) -> bytes | None:
        path = self.path_of(metadata, SegmentFileType.DESCRIPTOR)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RemoteStorageError(f"{path}: cannot read: {e}", retriable=True) from e

    def list_partitions(self) -> list[TopicIdPartition]:
        try:
            names = [e.name for e in os.scandir(self.root) if e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return []
        except OSError as e:
            raise RemoteStorageError(f"{self.root}: cannot list: {e}", retriable=True) from e
        parsed = (layout.parse_kafka_partition_dir(n) for n in names)
        return sorted((tp for tp in parsed if tp is not None), key=lambda tp: (tp.topic, tp.partition))

    # ---- listing (rlm verify) -------------------------------------------------------------
    def list_objects(self, prefix: str) -> list[StoredObject]:
        pdir = self.root / layout.checked_key(prefix.rstrip("/"))
        out: list[StoredObject] = []
        try:
            entries = list(os.scandir(pdir))
        except FileNotFoundError:
            return out
        except OSError as e:
            raise RemoteStorageError(f"{pdir}: cannot list: {e}", retriable=True) from e
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):  # deleted while listing
                if entry.is_file():
                    st = entry.stat()
                    out.append(StoredObject(prefix + entry.name, st.st_size, int(st.st_mtime * 1000)))
        return sorted(out, key=lambda o: o.key)

    def list_prefixes(self, prefix: str) -> list[str]:
        pdir = self.root / layout.checked_key(prefix.rstrip("/")) if prefix.strip("/") else self.root
        try:
            return sorted(e.name for e in os.scandir(pdir) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise RemoteStorageError(f"{pdir}: cannot list: {e}", retriable=True) from e

    def list_segment_objects(self, tp: TopicIdPartition) -> list[StoredObject]:
        pdir = self.root / layout.kafka_partition_dir(tp)
        out: list[StoredObject] = []
        try:
            entries = list(os.scandir(pdir))
        except FileNotFoundError:
            return out
        except OSError as e:
            raise RemoteStorageError(f"{pdir}: cannot list: {e}", retriable=True) from e
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):  # deleted while listing
                if entry.is_file(follow_symlinks=False) and entry.name != log_start.OBJECT_NAME:
                    st = entry.stat(follow_symlinks=False)
                    out.append(parse_name(entry.path, st.st_size, st.st_mtime_ns // 1_000_000))
        return sorted(out, key=lambda o: o.key)

    # ---- delete -----------------------------------------------------------------------------
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        if not self.config.delete_enable:
            return
        try:
            self._remove(metadata, strict=True)
        except OSError as e:
            raise RemoteStorageError(
                f"delete of {metadata.remote_log_segment_id} failed: {e}", retriable=True
            ) from e
        log.debug("rsm_segment_deleted", plugin=self.plugin_name, **layout.describe(metadata))

    def _remove(self, metadata: RemoteLogSegmentMetadata, strict: bool = False) -> None:
        # the .log first: once it is gone the segment is invisible even if a later unlink fails
        order = [
            SegmentFileType.SEGMENT,
            *(ft for ft in SegmentFileType if ft is not SegmentFileType.SEGMENT),
        ]
        for ft in order:
            path = self.path_of(metadata, ft)
            if strict:
                path.unlink(missing_ok=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)


def _tmp_name(final: Path) -> Path:
    """A temporary name beside ``final`` that no other write uses (listings give it no file type)."""
    return final.with_name(f"{final.name}.{uuid.uuid4().hex[:12]}.tmp")


def _regular_file_fd(stream: BinaryIO) -> int | None:
    """The descriptor of a plain local file (not of a wrapper, e.g. a fault-injecting one)."""
    try:
        fd = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) and stream.tell() == 0 else None
    except (OSError, AttributeError, ValueError):
        return None


def _load_sync_file_range() -> Any:
    """libc's ``sync_file_range`` (Linux), or ``None``."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_SYNC_FILE_RANGE: Any = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def _copy_chunk(src_fd: int, dst_fd: int, offset: int, early_writeback: bool) -> int:
    """One ``copy_file_range`` at ``offset``; with ``early_writeback``, start writing the chunk
    to disk now (``sync_file_range(SYNC_FILE_RANGE_WRITE)``, asynchronous, a hint only: the
    fsync before the rename is still what makes the file durable), so that the final fsync
    finds little left to write instead of the whole file."""
    n = os.copy_file_range(src_fd, dst_fd, _COPY_CHUNK, offset, offset)
    if n and early_writeback and _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(dst_fd, offset, n, _SYNC_FILE_RANGE_WRITE)  # errors: the fsync reports them
    return n


def _kernel_copy(src_fd: int, dst_fd: int, crc: integrity.Crc32c, early_writeback: bool = False) -> bool:
    """Copy with ``copy_file_range`` (no user-space write; reflinks on filesystems that have them)
    and checksum what landed in the destination. False if the kernel cannot do it here.

    The checksum is of the destination read back after the kernel wrote it (not of the source),
    so it covers the bytes actually written. To keep that second pass off the wall clock, the
    copy runs one chunk ahead in a helper thread (``copy_file_range`` releases the GIL) while this
    thread reads back and checksums the chunk before it, in a small reused buffer.
    """
    try:
        n = _copy_chunk(src_fd, dst_fd, 0, early_writeback)
    except OSError as e:
        if e.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            return False
        raise
    if n == 0:
        return True
    if n < _COPY_CHUNK:  # a small file: no thread
        offset = n
        while m := _copy_chunk(src_fd, dst_fd, offset, early_writeback):
            offset += m
        _readback(dst_fd, 0, offset, crc)
        return True
    with ThreadPoolExecutor(1, thread_name_prefix="local-copy") as pool:
        done = n
        ahead: Future[int] | None = pool.submit(_copy_chunk, src_fd, dst_fd, done, early_writeback)
        try:
            checked = 0
            while ahead is not None:
                _readback(dst_fd, checked, done, crc)
                checked = done
                n = ahead.result()
                ahead = None
                if n:
                    done += n
                    ahead = pool.submit(_copy_chunk, src_fd, dst_fd, done, early_writeback)
            _readback(dst_fd, checked, done, crc)
        finally:
            if ahead is not None:  # never leave a copy running on descriptors about to be closed
                with contextlib.suppress(BaseException):
                    ahead.result()
    return True


def _readback(fd: int, start: int, end: int, crc: integrity.Crc32c) -> None:
    """Fold bytes ``[start, end)`` of ``fd`` into ``crc``, read in a reused buffer."""
    buf = memoryview(bytearray(min(_READBACK_CHUNK, max(end - start, 0)) or 1))
    while start < end:
        n = os.preadv(fd, [buf[: min(len(buf), end - start)]], start)
        if n <= 0:
            raise OSError(errno.EIO, f"destination ended at byte {start} while reading back, expected {end}")
        crc.update(buf[:n])
        start += n


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
