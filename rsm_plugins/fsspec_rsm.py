"""``fsspec``: segments under any fsspec URL (``webhdfs://``, ``hdfs://``, ``gs://``, ``abfs://``,
``file://``, ...), in the same layout as ``local`` (Kafka's ``LocalTieredStorage``)::

    <url>/<topic>-<partition>-<topicId>/<20-digit start offset>-<segmentId>.<suffix>

so a ``file://`` store is interchangeable with a ``local`` one. On filesystems with a real rename
(local, HDFS, ...) each file is written under a temporary name and renamed into place; on object
stores (where "rename" is a copy) files are written in place, the ``.log`` last. A failed copy
removes what it wrote. Reads are ranged reads through fsspec's buffered files.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, BinaryIO

import structlog
from pydantic import Field, SecretStr, model_validator

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
    is_secret_key,
)
from .integrity import FileChecksum, LayoutCode, SegmentManifest
from .layout import SegmentFileType, SourceFile
from .listing import parse_name

log = structlog.get_logger(__name__)

#: Protocols whose "rename" is a server-side copy (or absent): write in place there.
NO_ATOMIC_RENAME = frozenset(
    {"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oci", "oss", "http", "https"}
)


class FsspecConfig(PluginConfig):
    url: str = Field(min_length=1, description="Root URL, e.g. webhdfs://namenode:9870/kafka/tiered.")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec filesystem options.")
    secret_options: dict[str, SecretStr] = Field(
        default_factory=dict, description="Filesystem options that are secrets (never logged)."
    )
    atomic_rename: bool | None = Field(None, description="Write temp name + rename; default by protocol.")
    read_block_size: int = Field(8 << 20, ge=1 << 16, description="Read-ahead block of fsspec files.")
    create_root: bool = Field(
        True, description="Create a missing root; false = a missing root is a configuration error."
    )

    @model_validator(mode="before")
    @classmethod
    def _credentials_are_secret(cls, data: Any) -> Any:
        """Credential-like storage options (``token``, ``secret``, ``password``) move to secret_options."""
        if not isinstance(data, dict) or not isinstance(data.get("storage_options"), Mapping):
            return data
        options = dict(data["storage_options"])
        secrets = dict(data.get("secret_options") or {})
        for key in [k for k in options if is_secret_key(k)]:
            secrets[key] = options.pop(key)
        return {**data, "storage_options": options, "secret_options": secrets}


class FsspecRemoteStorageManager(RemoteStorageManager[FsspecConfig]):
    """Remote tier on any fsspec filesystem. Thread-safe (one filesystem object per thread); picklable."""

    plugin_name = "fsspec"
    config_model = FsspecConfig
    transient_attributes = frozenset({"_local", "_lock", "_executor"})

    def __init__(self) -> None:
        self._root = ""
        self._protocol = ""
        self._local = threading.local()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def _pool(self) -> ThreadPoolExecutor:
        """Writes the auxiliary files of a copy in parallel (each thread has its own filesystem)."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(8, thread_name_prefix="rsm-fsspec")
            return self._executor

    def close(self) -> None:
        with self._lock:
            pool, self._executor = self._executor, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    # ---- configuration ----------------------------------------------------------------------
    def on_configure(self, cfg: FsspecConfig) -> None:
        fs = self._local.fs = self._new_fs()
        if not cfg.create_root:
            try:
                found = fs.isdir(self._root)
            except Exception as e:
                raise ConfigError(f"fsspec storage plugin: cannot look at root {cfg.url}: "
                                  f"{type(e).__name__}: {e}") from e
            if not found:
                raise ConfigError(f"fsspec storage plugin: root {cfg.url} does not exist "
                                  "(create_root is false: it is not created)")
            log.info("rsm_configured", plugin=self.plugin_name, url=cfg.url, protocol=self._protocol,
                     create_root=False)
            return
        try:
            fs.makedirs(self._root, exist_ok=True)
        except Exception as e:
            raise ConfigError(
                f"fsspec storage plugin: cannot create root {cfg.url}: {type(e).__name__}: {e}"
            ) from e
        log.info(
            "rsm_configured",
            plugin=self.plugin_name,
            url=cfg.url,
            protocol=self._protocol,
            atomic_rename=self.atomic_rename,
            storage_options=sorted(cfg.storage_options),
        )

    def _new_fs(self) -> Any:
        from fsspec.core import url_to_fs

        cfg = self.config
        opts = dict(cfg.storage_options)
        opts.update({k: v.get_secret_value() for k, v in cfg.secret_options.items()})
        try:
            fs, root = url_to_fs(cfg.url, skip_instance_cache=True, **opts)
        except ImportError as e:
            raise ConfigError(
                f"fsspec storage plugin: the filesystem for {cfg.url!r} needs a package: {e}"
            ) from e
        except (ValueError, TypeError) as e:
            raise ConfigError(f"fsspec storage plugin: cannot open {cfg.url!r}: {e}") from e
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self._root, self._protocol = str(root).rstrip("/") or "/", str(protocol)
        return fs

    @property
    def fs(self) -> Any:
        fs = getattr(self._local, "fs", None)
        if fs is None:
            fs = self._local.fs = self._new_fs()
        return fs

    @property
    def atomic_rename(self) -> bool:
        if self.config.atomic_rename is not None:
            return self.config.atomic_rename
        return self._protocol not in NO_ATOMIC_RENAME

    def path_of(self, metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType) -> str:
        return f"{self._root.rstrip('/')}/{layout.kafka_relative_path(metadata, file_type)}"

    # ---- copy -------------------------------------------------------------------------------
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        cfg = self.config
        fs = self.fs
        sums: dict[SegmentFileType, FileChecksum] = {}
        part_dir = self.path_of(metadata, SegmentFileType.SEGMENT).rsplit("/", 1)[0]
        try:
            fs.makedirs(part_dir, exist_ok=True)
            if segment_data.transaction_index is None:  # a stale one from an earlier copy of this id
                self._rm_quiet(fs, self.path_of(metadata, SegmentFileType.TRANSACTION_INDEX))
            *aux, log_file = layout.source_files(segment_data)
            futures = {
                src.file_type: self._pool().submit(
                    self._write, None, src, self.path_of(metadata, src.file_type)
                )
                for src in aux
            }
            wait(futures.values())
            for ft, fut in futures.items():
                sums[ft] = fut.result()
            sums[log_file.file_type] = self._write(fs, log_file, self.path_of(metadata, log_file.file_type))
        except Exception as e:
            err = _map(e, part_dir, "copy")
            log.warning(
                "segment_copy_failed", plugin=self.plugin_name, error=str(err), **layout.describe(metadata)
            )
            self._remove(fs, metadata, strict=False)
            raise err from e
        log.debug(
            "rsm_segment_written",
            plugin=self.plugin_name,
            bytes=sums[SegmentFileType.SEGMENT].size,
            **layout.describe(metadata),
        )
        if cfg.custom_metadata_max_bytes == 0:
            return None
        return integrity.encode(
            SegmentManifest(LayoutCode.KAFKA, sums, cfg.url), cfg.custom_metadata_max_bytes
        )

    def _write(self, fs: Any, src: SourceFile, final: str) -> FileChecksum:
        fs = fs if fs is not None else self.fs
        target = f"{final}.{uuid.uuid4().hex[:12]}.tmp" if self.atomic_rename else final
        crc = integrity.Crc32c()
        try:
            with fs.open(target, "wb") as out:
                self.write_source(src, out, crc)
            if target != final:
                self._rename(fs, target, final)
        except BaseException:
            if target != final:
                self._rm_quiet(fs, target)
            raise
        return crc.result()

    def _rename(self, fs: Any, tmp: str, final: str) -> None:
        """Rename over an existing file. HDFS's rename refuses (and WebHDFS answers ``false``, not an
        error) when the target exists, so the target is removed first and the outcome checked."""
        self._rm_quiet(fs, final)
        fs.mv(tmp, final)
        if fs.exists(tmp) or not fs.exists(final):
            raise RemoteStorageError(f"rename of {tmp} to {final} did not happen", retriable=True)

    @staticmethod
    def _rm_quiet(fs: Any, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(path)

    # ---- published log start offset (rsm_plugins.log_start) -------------------------------
    def log_start_path(self, tp: TopicIdPartition) -> str:
        return f"{self._root.rstrip('/')}/{layout.kafka_partition_dir(tp)}/{log_start.OBJECT_NAME}"

    def write_log_start_offset(self, tp: TopicIdPartition, log_start_offset: int) -> bool:
        final = self.log_start_path(tp)
        data = log_start.encode(tp, log_start_offset, int(time.time() * 1000))
        fs = self.fs
        try:
            fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            self._write(fs, SourceFile(SegmentFileType.SEGMENT, data=data), final)
        except Exception as e:
            raise _map(e, final, "write") from e
        return True

    def read_log_start_offset(self, tp: TopicIdPartition) -> int | None:
        path = self.log_start_path(tp)
        try:
            with self.fs.open(path, "rb") as f:
                data = f.read(log_start.MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except Exception as e:
            err = _map(e, path, "read")
            if isinstance(err, RemoteResourceNotFoundError):
                return None
            raise err from e
        return log_start.decode(tp, data, path)

    def delete_log_start_offset(self, tp: TopicIdPartition) -> None:
        path = self.log_start_path(tp)
        try:
            self._rm_quiet(self.fs, path)
        except Exception as e:
            raise _map(e, path, "delete") from e

    # ---- segment descriptors (rsm_plugins.descriptor) --------------------------------------
    def write_segment_descriptor(self, metadata: RemoteLogSegmentMetadata, data: bytes) -> bool:
        final = self.path_of(metadata, SegmentFileType.DESCRIPTOR)
        fs = self.fs
        try:
            fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            self._write(fs, SourceFile(SegmentFileType.DESCRIPTOR, data=data), final)
        except Exception as e:
            raise _map(e, final, "write") from e
        return True

    def read_segment_descriptor(self, metadata: RemoteLogSegmentMetadata) -> bytes | None:
        path = self.path_of(metadata, SegmentFileType.DESCRIPTOR)
        try:
            with self.fs.open(path, "rb") as f:
                data: bytes = f.read()
                return data
        except FileNotFoundError:
            return None
        except Exception as e:
            err = _map(e, path, "read")
            if isinstance(err, RemoteResourceNotFoundError):
                return None
            raise err from e

    def list_partitions(self) -> list[TopicIdPartition]:
        root = self._root.rstrip("/")
        try:
            entries = self.fs.ls(root, detail=True)
        except FileNotFoundError:
            return []
        except Exception as e:
            raise _map(e, root, "list") from e
        parsed = (layout.parse_kafka_partition_dir(str(i["name"]).rstrip("/").rsplit("/", 1)[-1])
                  for i in entries if i.get("type") == "directory")
        return sorted((tp for tp in parsed if tp is not None), key=lambda tp: (tp.topic, tp.partition))

    # ---- fetch ------------------------------------------------------------------------------
    def list_objects(self, prefix: str) -> list[StoredObject]:
        pdir = self._key_path(prefix.rstrip("/"))
        try:
            entries = self.fs.ls(pdir, detail=True)
        except FileNotFoundError:
            return []
        except Exception as e:
            raise _map(e, pdir, "list") from e
        out = []
        for info in entries:
            if info.get("type") != "file":
                continue
            mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified") or 0
            ms = int(mtime.timestamp() * 1000) if hasattr(mtime, "timestamp") else int(float(mtime) * 1000)
            name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
            out.append(StoredObject(prefix + name, int(info.get("size") or 0), ms))
        return sorted(out, key=lambda o: o.key)

    def list_prefixes(self, prefix: str) -> list[str]:
        pdir = self._key_path(prefix.rstrip("/")) if prefix.strip("/") else self._root.rstrip("/")
        try:
            entries = self.fs.ls(pdir, detail=True)
        except FileNotFoundError:
            return []
        except Exception as e:
            raise _map(e, pdir, "list") from e
        return sorted(str(i["name"]).rstrip("/").rsplit("/", 1)[-1] for i in entries
                      if i.get("type") == "directory")

    def list_segment_objects(self, tp: TopicIdPartition) -> list[StoredObject]:
        pdir = f"{self._root.rstrip('/')}/{layout.kafka_partition_dir(tp)}"
        try:
            entries = self.fs.ls(pdir, detail=True)
        except FileNotFoundError:
            return []
        except Exception as e:
            raise _map(e, pdir, "list") from e
        out = []
        for info in entries:
            if info.get("type") != "file" or str(info["name"]).endswith("/" + log_start.OBJECT_NAME):
                continue
            mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified") or 0
            ms = int(mtime.timestamp() * 1000) if hasattr(mtime, "timestamp") else int(float(mtime) * 1000)
            out.append(parse_name(str(info["name"]), int(info.get("size") or 0), ms))
        return sorted(out, key=lambda o: o.key)

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        return self._fetch(metadata, SegmentFileType.SEGMENT, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        return self._fetch(metadata, SegmentFileType.for_index(index_type), 0, None)

    def _fetch(
        self, metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType, start: int, end: int | None
    ) -> BinaryIO:
        def expected_sum() -> FileChecksum | None:
            if not self.config.verify_checksums:
                return None
            manifest = integrity.decode(metadata.custom_metadata)
            return manifest.checksum(file_type) if manifest else None

        return self._open_path(self.path_of(metadata, file_type), start, end, expected_sum)

    def open_object(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        return self._open_path(self._key_path(key), start, end, lambda: None)

    def object_size(self, key: str) -> int:
        path = self._key_path(key)
        try:
            return int(self.fs.size(path))
        except Exception as e:
            raise _map(e, path, "size") from e

    def _key_path(self, key: str) -> str:
        return f"{self._root.rstrip('/')}/{layout.checked_key(key)}"

    def _open_path(
        self, path: str, start: int, end: int | None, expected_sum: Callable[[], FileChecksum | None]
    ) -> BinaryIO:
        what = f"{self._protocol}://{path.lstrip('/')}" if self._protocol != "file" else path
        try:
            f = self.fs.open(path, "rb", block_size=self.config.read_block_size, cache_type="readahead")
        except Exception as e:
            raise _map(e, what, "open") from e
        try:
            size = int(f.size) if getattr(f, "size", None) is not None else int(self.fs.size(path))
            begin, stop = streams.check_range(start, end, size, what)
            expected = expected_sum() if streams.covers_whole(begin, stop, size) else None
            if begin:
                f.seek(begin)
            return streams.wrap(
                f, stop - begin, what=what, expected=expected, map_error=lambda e: _map(e, what, "read")
            )
        except BaseException:
            f.close()
            raise

    # ---- delete -----------------------------------------------------------------------------
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        try:
            self._remove(self.fs, metadata, strict=True)
        except Exception as e:
            raise _map(e, self.path_of(metadata, SegmentFileType.SEGMENT), "delete") from e
        log.debug("rsm_segment_deleted", plugin=self.plugin_name, **layout.describe(metadata))

    def _remove(self, fs: Any, metadata: RemoteLogSegmentMetadata, strict: bool) -> None:
        order = [
            SegmentFileType.SEGMENT,
            *(ft for ft in SegmentFileType if ft is not SegmentFileType.SEGMENT),
        ]
        for ft in order:  # the .log (commit marker) first
            try:
                self._rm_quiet(fs, self.path_of(metadata, ft))
            except Exception:
                if strict:
                    raise


def _map(e: BaseException, where: str, action: str) -> RemoteStorageError:
    """Translate fsspec/requests/OS errors at the plugin edge."""
    if isinstance(e, RemoteStorageError):
        return e
    if isinstance(e, FileNotFoundError):
        return RemoteResourceNotFoundError(f"{action} {where}: not found")
    if isinstance(e, PermissionError):
        return RemoteStorageError(f"{action} {where}: permission denied: {e}", retriable=False)
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        retriable = status >= 500 or status in (408, 429)
        return RemoteStorageError(f"{action} {where}: HTTP {status}: {e}", retriable=retriable)
    if isinstance(e, OSError | ConnectionError | TimeoutError | RuntimeError):
        # RuntimeError: WebHDFS's wrapper for server-side exceptions (standby, safe mode, ...)
        return RemoteStorageError(f"{action} {where}: {type(e).__name__}: {e}", retriable=True)
    return RemoteStorageError(f"{action} {where}: {type(e).__name__}: {e}", retriable=False)
