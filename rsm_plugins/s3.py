"""``s3``: segments as objects in an S3 bucket (AWS or any S3-compatible store), through boto3.

Key layout (see :func:`rsm_plugins.layout.s3_key`)::

    <prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.<suffix>

The returned custom metadata records ``bucket/prefix`` (when it fits the 128-byte budget) and a
CRC-32C per file, so a reader finds the objects without guessing the writer's config and checks
whole-file reads. The ``.log`` object is written last and deleted first: it is the commit marker.
A failed copy aborts its multipart upload and deletes what it wrote.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, BinaryIO, Literal

import structlog
from pydantic import Field, SecretStr

from . import integrity, layout, log_start, streams
from .api import (
    IndexType,
    LogSegmentData,
    PluginConfig,
    RemoteLogSegmentMetadata,
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from .integrity import FileChecksum, LayoutCode, SegmentManifest
from .layout import SegmentFileType
from .listing import StoredObject, parse_name
from .s3_direct_get import PRESIGN_SECONDS, DirectRangeGetter
from .s3_errors import client_error_code, map_error
from .s3_transfer import ChunkedBody, Uploader

log = structlog.get_logger(__name__)
MiB = 1 << 20


class S3Config(PluginConfig):
    bucket: str = Field(min_length=3, max_length=63, description="Bucket name (must exist).")
    prefix: str = Field("", description="Key prefix, e.g. 'tiered/' (include the trailing slash).")
    endpoint_url: str | None = Field(
        None, description="For S3-compatible stores, e.g. http://127.0.0.1:8333."
    )
    region: str | None = Field(None, description="AWS region; default from the environment/profile.")
    path_style: bool = Field(False, description="Path-style addressing (most S3-compatible stores).")
    access_key_id: SecretStr | None = Field(None, description="Omit to use the default credential chain.")
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    profile: str | None = Field(None, description="Named profile of the shared AWS config files.")
    storage_class: str | None = Field(None, description="e.g. STANDARD_IA, INTELLIGENT_TIERING.")
    sse: Literal["AES256", "aws:kms", "aws:kms:dsse"] | None = Field(
        None, description="Server-side encryption."
    )
    sse_kms_key_id: SecretStr | None = Field(None, description="KMS key for sse=aws:kms.")
    multipart_threshold: int = Field(32 * MiB, ge=1, description="Files above this use multipart upload.")
    part_size: int = Field(8 * MiB, ge=5 * MiB, le=5 * 1024 * MiB, description="Multipart part size.")
    upload_concurrency: int = Field(10, ge=1, le=64, description="Parts uploaded in parallel per file.")
    fetch_chunk_size: int = Field(8 * MiB, ge=MiB, description="Range size of the parallel GETs of a read.")
    fetch_concurrency: int = Field(8, ge=1, le=64, description="Chunks in flight per read stream.")
    fetch_threads: int = Field(16, ge=1, le=256, description="Threads shared by all read streams.")
    max_attempts: int = Field(8, ge=1, le=50, description="Attempts per request (throttling, 5xx, network).")
    retry_mode: Literal["standard", "adaptive"] = "standard"
    connect_timeout: float = Field(10.0, gt=0)
    read_timeout: float = Field(60.0, gt=0)
    max_pool_connections: int = Field(64, ge=1)
    checksum_calculation: Literal["when_supported", "when_required"] = Field(
        "when_required", description="botocore request checksums; the plugin checks CRC-32C itself."
    )
    upload_checksums: bool = Field(
        True,
        description="Send the CRC-32C the plugin computes while reading with every upload and part, "
        "so the store checks what it received (false: for a store that rejects checksum headers).",
    )
    use_recorded_location: bool = Field(True, description="Read from the bucket/prefix the copy recorded.")
    direct_range_gets: bool = Field(
        True,
        description="Read the read core's chunks with presigned GETs through http.client (one copy from "
        "the socket) instead of boto3 (four); any answer but a complete 206 is retried through boto3.",
    )


class S3RemoteStorageManager(RemoteStorageManager[S3Config]):
    """Remote tier in S3. Thread-safe; picklable (clients and pools are re-created lazily)."""

    plugin_name = "s3"
    config_model = S3Config
    transient_attributes = frozenset({"_lock", "_client", "_pools", "_direct"})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client: Any = None
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._direct: DirectRangeGetter | None = None
        self._listing_refused = False  # said once: see _abort_open_uploads

    # ---- configuration and clients ----------------------------------------------------------
    def on_configure(self, cfg: S3Config) -> None:
        log.info(
            "rsm_configured",
            plugin=self.plugin_name,
            bucket=cfg.bucket,
            prefix=cfg.prefix,
            endpoint_url=cfg.endpoint_url,
            region=cfg.region,
            path_style=cfg.path_style,
            explicit_credentials=cfg.access_key_id is not None,
        )

    @property
    def client(self) -> Any:
        """The boto3 client, created on first use (also after unpickling)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    def _make_client(self, **overrides: Any) -> Any:
        import boto3
        from botocore.config import Config

        cfg = self.config
        session = boto3.session.Session(
            botocore_session=_botocore_session(),
            aws_access_key_id=_reveal(cfg.access_key_id),
            aws_secret_access_key=_reveal(cfg.secret_access_key),
            aws_session_token=_reveal(cfg.session_token),
            region_name=cfg.region,
            profile_name=cfg.profile,
        )
        bc = Config(
            **overrides,
            s3={"addressing_style": "path" if cfg.path_style else "auto"},
            # botocore's ``max_attempts`` counts retries after the first try; ours counts attempts
            retries={"total_max_attempts": cfg.max_attempts, "mode": cfg.retry_mode},
            connect_timeout=cfg.connect_timeout,
            read_timeout=cfg.read_timeout,
            max_pool_connections=cfg.max_pool_connections,
            request_checksum_calculation=cfg.checksum_calculation,
            response_checksum_validation="when_required",
        )
        return session.client("s3", endpoint_url=cfg.endpoint_url, config=bc)

    def _direct_getter(self) -> DirectRangeGetter | None:
        """The one-copy GET path (:mod:`rsm_plugins.s3_direct_get`), created on first use."""
        cfg = self.config
        if not cfg.direct_range_gets:
            return None
        if self._direct is None:
            with self._lock:
                if self._direct is None:
                    # SigV4 query signing (a presigned URL's default can be SigV2), same addressing
                    signer = self._make_client(signature_version="s3v4")
                    # the CA bundle botocore resolved (AWS_CA_BUNDLE, the profile's, certifi's)
                    session = getattr(getattr(signer, "_endpoint", None), "http_session", None)
                    verify = getattr(session, "_verify", None)
                    self._direct = DirectRangeGetter(
                        lambda bucket, key: str(
                            signer.generate_presigned_url(
                                "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=PRESIGN_SECONDS
                            )
                        ),
                        connect_timeout=cfg.connect_timeout,
                        read_timeout=cfg.read_timeout,
                        ca_bundle=verify,
                    )
        return self._direct

    def _pool(self, which: Literal["file", "part", "fetch"]) -> ThreadPoolExecutor:
        """Separate pools so that a task never waits on a task queued behind it in its own pool."""
        cfg = self.config
        with self._lock:
            pool = self._pools.get(which)
            if pool is None:
                size = {"file": 8, "part": cfg.upload_concurrency * 2, "fetch": cfg.fetch_threads}[which]
                pool = self._pools[which] = ThreadPoolExecutor(size, thread_name_prefix=f"rsm-s3-{which}")
            return pool

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
            client, self._client = self._client, None
            direct, self._direct = self._direct, None
        if direct is not None:
            direct.close()
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        if client is not None:
            client.close()

    # ---- keys -------------------------------------------------------------------------------
    def key(
        self, metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType, prefix: str | None = None
    ) -> str:
        return layout.s3_key(self.config.prefix if prefix is None else prefix, metadata, file_type)

    def _location(self, metadata: RemoteLogSegmentMetadata) -> tuple[str, str]:
        """(bucket, prefix) to read from: the copy's recorded location, else the config's."""
        cfg = self.config
        if cfg.use_recorded_location:
            manifest = integrity.decode(metadata.custom_metadata)
            if manifest is not None and manifest.layout is LayoutCode.S3 and manifest.location:
                bucket, _, prefix = manifest.location.partition("/")
                return bucket, prefix
        return cfg.bucket, cfg.prefix

    # ---- copy -------------------------------------------------------------------------------
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        cfg = self.config
        files = layout.source_files(segment_data)
        uploader = Uploader(
            self.client,
            cfg.bucket,
            self._pool("part"),
            self.open_source,
            self._extra_args(),
            cfg.multipart_threshold,
            cfg.part_size,
            cfg.upload_concurrency,
            cfg.upload_checksums,
        )
        sums: dict[SegmentFileType, FileChecksum] = {}
        pending: list[Future[Any]] = []
        try:
            # The index files go up while the segment's multipart upload runs (they used to be
            # uploaded first, so their PUTs' round trips were added to every copy's time). The
            # segment's parts use the "part" pool, the index files the "file" pool, so neither
            # waits on work queued behind it.
            futures = {
                f.file_type: self._pool("file").submit(
                    uploader.upload, self.key(metadata, f.file_type), path=f.path, data=f.data
                )
                for f in files
                if f.file_type is not SegmentFileType.SEGMENT
            }
            pending += futures.values()
            if segment_data.transaction_index is None:  # a stale one from an earlier copy of this id
                stale = [self.key(metadata, SegmentFileType.TRANSACTION_INDEX)]
                pending.append(self._pool("file").submit(self._delete_keys, cfg.bucket, stale))
            sums[SegmentFileType.SEGMENT] = uploader.upload(
                self.key(metadata, SegmentFileType.SEGMENT), path=files[-1].path
            )
            for ft, fut in futures.items():
                sums[ft] = fut.result()
            for fut in pending:
                fut.result()
        except Exception as e:
            # nothing of this copy may still be in flight when its objects are deleted below
            for fut in pending:
                fut.cancel()
            wait(pending)
            err = map_error(e, cfg.bucket, None, "copy")
            log.warning(
                "segment_copy_failed", plugin=self.plugin_name, error=str(err), **layout.describe(metadata)
            )
            try:
                self._delete_segment(cfg.bucket, cfg.prefix, metadata)
            except RemoteStorageError as cleanup:
                log.error(
                    "segment_copy_cleanup_failed",
                    plugin=self.plugin_name,
                    error=str(cleanup),
                    **layout.describe(metadata),
                )
            raise err from e
        log.debug(
            "rsm_segment_written",
            plugin=self.plugin_name,
            bucket=cfg.bucket,
            bytes=sums[SegmentFileType.SEGMENT].size,
            **layout.describe(metadata),
        )
        if cfg.custom_metadata_max_bytes == 0:
            return None
        return integrity.encode(
            SegmentManifest(LayoutCode.S3, sums, f"{cfg.bucket}/{cfg.prefix}"), cfg.custom_metadata_max_bytes
        )

    def _extra_args(self) -> dict[str, str]:
        cfg = self.config
        extra: dict[str, str] = {}
        if cfg.storage_class:
            extra["StorageClass"] = cfg.storage_class
        if cfg.sse:
            extra["ServerSideEncryption"] = cfg.sse
        if cfg.sse_kms_key_id is not None:
            extra["SSEKMSKeyId"] = cfg.sse_kms_key_id.get_secret_value()
        return extra

    # ---- fetch ------------------------------------------------------------------------------
    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        bucket, prefix = self._location(metadata)
        key = self.key(metadata, SegmentFileType.SEGMENT, prefix)
        return self._get_range(
            bucket,
            key,
            start_position,
            end_position,
            lambda: self._expected(metadata, SegmentFileType.SEGMENT),
        )

    def read_log_segment_range(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int
    ) -> bytes:
        """One copy from the socket when the direct path answers (see :mod:`.s3_direct_get`);
        otherwise, and for every error, the boto3 stream of :meth:`fetch_log_segment`."""
        direct = self._direct_getter() if 0 <= start_position <= end_position else None
        if direct is not None:
            bucket, prefix = self._location(metadata)
            key = self.key(metadata, SegmentFileType.SEGMENT, prefix)
            got = direct.get(bucket, key, start_position, end_position)
            if got is not None:
                data, size = got
                if streams.covers_whole(start_position, start_position + len(data), size):
                    self._check_whole(data, metadata, f"s3://{bucket}/{key}")
                return data
        return super().read_log_segment_range(metadata, start_position, end_position)

    def read_log_segment_range_into(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, out: memoryview
    ) -> int:
        """Bytes from ``start_position`` received into ``out`` (a scan's reused buffer: the read
        core's ``fetcher.read_ahead``); how many (``len(out)``, fewer only at the object's end).
        Straight from the socket when the direct path answers; otherwise the boto3 read, copied."""
        if not len(out):
            return 0
        direct = self._direct_getter() if start_position >= 0 else None
        if direct is not None:
            bucket, prefix = self._location(metadata)
            key = self.key(metadata, SegmentFileType.SEGMENT, prefix)
            got = direct.get_into(bucket, key, start_position, out)
            if got is not None:
                n, size = got
                if streams.covers_whole(start_position, start_position + n, size):
                    self._check_whole(out[:n], metadata, f"s3://{bucket}/{key}")
                return n
        # boto3's read (retries, typed errors), not the direct path again
        data = super().read_log_segment_range(metadata, start_position, start_position + len(out) - 1)
        n = min(len(data), len(out))
        out[:n] = data[:n]
        return len(data)

    def _check_whole(self, data: bytes | memoryview, metadata: RemoteLogSegmentMetadata, what: str) -> None:
        streams.check_whole_read(data, self._expected(metadata, SegmentFileType.SEGMENT), what)

    def open_object(self, key: str, start: int = 0, end: int | None = None) -> BinaryIO:
        cfg = self.config
        return self._get_range(cfg.bucket, cfg.prefix + layout.checked_key(key), start, end, lambda: None)

    def object_size(self, key: str) -> int:
        cfg = self.config
        return self._size(cfg.bucket, cfg.prefix + layout.checked_key(key))

    def _get_range(
        self,
        bucket: str,
        key: str,
        start_position: int,
        end_position: int | None,
        expected_sum: Callable[[], FileChecksum | None],
    ) -> BinaryIO:
        """Ranged GETs of ``start_position..end_position`` (inclusive), in parallel chunks when long."""
        what = f"s3://{bucket}/{key}"
        if start_position < 0:
            raise RemoteRangeError(f"{what}: start position {start_position} is negative")
        if end_position is not None and end_position < start_position:
            raise RemoteRangeError(
                f"{what}: end position {end_position} is before start position {start_position}"
            )
        cfg = self.config
        first_stop = start_position + cfg.fetch_chunk_size
        if end_position is not None:
            first_stop = min(first_stop, end_position + 1)
        try:
            resp = self.client.get_object(
                Bucket=bucket, Key=key, Range=f"bytes={start_position}-{first_stop - 1}"
            )
        except Exception as e:
            err = map_error(e, bucket, key, "GetObject")
            if isinstance(err, RemoteRangeError) and start_position == 0 and self._size(bucket, key) == 0:
                return streams.wrap(_Empty(), 0, what=what)
            if isinstance(err, RemoteRangeError):
                raise RemoteRangeError(
                    f"{what}: start position {start_position} is at or past the end"
                ) from e
            raise err from e
        total = _total_size(resp, start_position, what)
        try:
            begin, stop = streams.check_range(start_position, end_position, total, what)
        except RemoteRangeError:
            resp["Body"].close()
            raise
        got = int(resp["ContentLength"])
        expected = expected_sum() if streams.covers_whole(begin, stop, total) else None
        inner: Any = resp["Body"]
        if begin + got < stop:
            inner = ChunkedBody(
                resp["Body"],
                got,
                client=self.client,
                bucket=bucket,
                key=key,
                etag=resp.get("ETag"),
                first_stop=begin + got,
                stop=stop,
                chunk_size=cfg.fetch_chunk_size,
                pool=self._pool("fetch"),
                concurrency=cfg.fetch_concurrency,
                attempts=cfg.max_attempts,
            )
        return streams.wrap(
            inner,
            stop - begin,
            what=what,
            expected=expected,
            map_error=lambda e: map_error(e, bucket, key, "GetObject body"),
        )

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        bucket, prefix = self._location(metadata)
        key = self.key(metadata, SegmentFileType.for_index(index_type), prefix)
        try:
            resp = self.client.get_object(Bucket=bucket, Key=key)
        except Exception as e:
            raise map_error(e, bucket, key, "GetObject") from e
        length = int(resp["ContentLength"])
        return streams.wrap(
            resp["Body"],
            length,
            what=f"s3://{bucket}/{key}",
            expected=self._expected(metadata, SegmentFileType.for_index(index_type)),
            map_error=lambda e: map_error(e, bucket, key, "GetObject body"),
        )

    def _expected(
        self, metadata: RemoteLogSegmentMetadata, file_type: SegmentFileType
    ) -> FileChecksum | None:
        if not self.config.verify_checksums:
            return None
        manifest = integrity.decode(metadata.custom_metadata)
        return manifest.checksum(file_type) if manifest else None

    def _size(self, bucket: str, key: str) -> int:
        try:
            return int(self.client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except Exception as e:
            raise map_error(e, bucket, key, "HeadObject") from e

    # ---- published log start offset (rsm_plugins.log_start) -------------------------------
    def log_start_key(self, tp: TopicIdPartition) -> str:
        return layout.s3_partition_prefix(self.config.prefix, tp) + log_start.OBJECT_NAME

    def write_log_start_offset(self, tp: TopicIdPartition, log_start_offset: int) -> bool:
        # a PUT is atomic (readers see the old or the new object); no storage class: the object
        # is read often and is tiny, so an archive class would only slow every reader down
        bucket, key = self.config.bucket, self.log_start_key(tp)
        extra = {k: v for k, v in self._extra_args().items() if k != "StorageClass"}
        body = log_start.encode(tp, log_start_offset, int(time.time() * 1000))
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json", **extra)
        except Exception as e:
            raise map_error(e, bucket, key, "PutObject") from e
        return True

    def read_log_start_offset(self, tp: TopicIdPartition) -> int | None:
        bucket, key = self.config.bucket, self.log_start_key(tp)
        try:
            resp = self.client.get_object(Bucket=bucket, Key=key)
            data = resp["Body"].read(log_start.MAX_BYTES + 1)
            resp["Body"].close()
        except Exception as e:
            err = map_error(e, bucket, key, "GetObject")
            if isinstance(err, RemoteResourceNotFoundError):
                return None
            raise err from e
        return log_start.decode(tp, data, f"s3://{bucket}/{key}")

    def delete_log_start_offset(self, tp: TopicIdPartition) -> None:
        self._delete_keys(self.config.bucket, [self.log_start_key(tp)])

    # ---- segment descriptors (rsm_plugins.descriptor) --------------------------------------
    def write_segment_descriptor(self, metadata: RemoteLogSegmentMetadata, data: bytes) -> bool:
        bucket, prefix = self._location(metadata)
        key = self.key(metadata, SegmentFileType.DESCRIPTOR, prefix)
        extra = {k: v for k, v in self._extra_args().items() if k != "StorageClass"}
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/json", **extra)
        except Exception as e:
            raise map_error(e, bucket, key, "PutObject") from e
        return True

    def read_segment_descriptor(self, metadata: RemoteLogSegmentMetadata) -> bytes | None:
        bucket, prefix = self._location(metadata)
        key = self.key(metadata, SegmentFileType.DESCRIPTOR, prefix)
        try:
            resp = self.client.get_object(Bucket=bucket, Key=key)
            data: bytes = resp["Body"].read()
            resp["Body"].close()
        except Exception as e:
            err = map_error(e, bucket, key, "GetObject")
            if isinstance(err, RemoteResourceNotFoundError):
                return None
            raise err from e
        return data

    def list_partitions(self) -> list[TopicIdPartition]:
        cfg = self.config
        out: list[TopicIdPartition] = []
        try:
            pages = self.client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=cfg.bucket, Prefix=cfg.prefix, Delimiter="/"):
                for cp in page.get("CommonPrefixes", []):
                    head = layout.parse_s3_topic_dir(str(cp["Prefix"])[len(cfg.prefix) :].rstrip("/"))
                    if head is None:
                        continue
                    topic, topic_id = head
                    sub = str(cp["Prefix"])
                    for page2 in pages.paginate(Bucket=cfg.bucket, Prefix=sub, Delimiter="/"):
                        for cp2 in page2.get("CommonPrefixes", []):
                            part = str(cp2["Prefix"])[len(sub) :].rstrip("/")
                            if part.isdigit():
                                out.append(TopicIdPartition(topic_id, topic, int(part)))
        except Exception as e:
            raise map_error(e, cfg.bucket, cfg.prefix, "ListObjectsV2") from e
        return sorted(out, key=lambda tp: (tp.topic, tp.partition))

    def list_objects(self, prefix: str) -> list[StoredObject]:
        cfg = self.config
        full = cfg.prefix + layout.checked_key(prefix.rstrip("/")) + "/"
        out = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=cfg.bucket, Prefix=full, Delimiter="/"
            )
            for page in pages:
                for o in page.get("Contents", []):
                    ms = int(o["LastModified"].timestamp() * 1000)
                    out.append(StoredObject(str(o["Key"])[len(cfg.prefix) :], int(o["Size"]), ms))
        except Exception as e:
            raise map_error(e, cfg.bucket, full, "ListObjectsV2") from e
        return sorted(out, key=lambda o: o.key)

    def list_prefixes(self, prefix: str) -> list[str]:
        cfg = self.config
        full = cfg.prefix + (layout.checked_key(prefix.strip("/")) + "/" if prefix.strip("/") else "")
        out: list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=cfg.bucket, Prefix=full, Delimiter="/"
            )
            for page in pages:
                out += [str(cp["Prefix"])[len(full) :].rstrip("/") for cp in page.get("CommonPrefixes", [])]
        except Exception as e:
            raise map_error(e, cfg.bucket, full, "ListObjectsV2") from e
        return sorted(out)

    def list_segment_objects(self, tp: TopicIdPartition) -> list[StoredObject]:
        cfg = self.config
        bucket, prefix = cfg.bucket, f"{cfg.prefix}{tp.topic}-{tp.topic_id.text}/{tp.partition}/"
        out = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for o in page.get("Contents", []):
                    if str(o["Key"]).endswith("/" + log_start.OBJECT_NAME):
                        continue  # not a segment file (published log start offset)
                    ms = int(o["LastModified"].timestamp() * 1000)
                    out.append(parse_name(str(o["Key"]), int(o["Size"]), ms))
        except Exception as e:
            raise map_error(e, bucket, prefix, "ListObjectsV2") from e
        return out

    # ---- delete -----------------------------------------------------------------------------
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        bucket, prefix = self._location(metadata)
        self._delete_segment(bucket, prefix, metadata)
        log.debug("rsm_segment_deleted", plugin=self.plugin_name, bucket=bucket, **layout.describe(metadata))

    def _delete_segment(self, bucket: str, prefix: str, metadata: RemoteLogSegmentMetadata) -> None:
        # the .log (commit marker) in its own request first, so a half-done delete leaves no visible segment
        self._delete_keys(bucket, [self.key(metadata, SegmentFileType.SEGMENT, prefix)])
        others = [
            self.key(metadata, ft, prefix) for ft in SegmentFileType if ft is not SegmentFileType.SEGMENT
        ]
        self._delete_keys(bucket, others)
        self._abort_open_uploads(bucket, [self.key(metadata, SegmentFileType.SEGMENT, prefix), *others])

    def _abort_open_uploads(self, bucket: str, keys: list[str]) -> None:
        """Abort any multipart upload still open for one of ``keys`` (one segment's objects).

        Why: a failed copy aborts its upload, but when the store refuses the abort too (503s to
        every request, a network cut) the upload stays open and its parts are billed until a
        lifecycle rule sweeps them. The segment's delete, which the daemon repeats until it
        succeeds (a failed copy's cleanup, then the abandoned copy's undo), finds it here. A
        retriable error fails the delete so that it is repeated; a store or policy without the
        listing (``s3:ListBucketMultipartUploads`` denied, not implemented) is said once and the
        delete goes on, as it did before this existed.
        """
        wanted = set(keys)
        common = os.path.commonprefix(keys)  # noqa: RUF071 (by character: the keys share "<offset>-<id>.")
        markers: dict[str, str] = {}
        try:
            while True:
                page = self.client.list_multipart_uploads(Bucket=bucket, Prefix=common, **markers)
                for upload in page.get("Uploads", []):
                    if upload.get("Key") in wanted:
                        self._abort_upload(bucket, upload["Key"], upload["UploadId"])
                if not page.get("IsTruncated"):
                    return
                markers = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}
        except RemoteStorageError:
            raise
        except Exception as e:
            err = map_error(e, bucket, common, "ListMultipartUploads")
            if err.retriable:
                raise err from e
            if not self._listing_refused:
                self._listing_refused = True
                log.warning(
                    "s3_multipart_listing_refused",
                    plugin=self.plugin_name,
                    error=str(err),
                    consequence="uploads whose abort failed are left to the bucket's lifecycle rule",
                )

    def _abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        except Exception as e:
            err = map_error(e, bucket, key, "AbortMultipartUpload")
            if not isinstance(err, RemoteResourceNotFoundError):  # already gone: what was wanted
                raise err from e
        log.info("s3_open_upload_aborted", plugin=self.plugin_name, key=key, upload_id=upload_id)

    def _delete_keys(self, bucket: str, keys: list[str]) -> None:
        try:
            resp = self.client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
        except Exception as e:
            raise map_error(e, bucket, keys[0], "DeleteObjects") from e
        errors = [err for err in resp.get("Errors", []) if err.get("Code") not in ("NoSuchKey", "NotFound")]
        if errors:
            first = errors[0]
            raise RemoteStorageError(
                f"DeleteObjects s3://{bucket}: {len(errors)} key(s) not deleted, e.g. {first.get('Key')}: "
                f"{first.get('Code')}: {first.get('Message')}",
                retriable=True,
            )


class _Empty:
    def read(self, n: int = -1) -> bytes:
        return b""

    def close(self) -> None:
        pass


_LOADER: Any = None
_LOADER_LOCK = threading.Lock()


def _botocore_session() -> Any:
    """A new botocore session whose service-model loader is shared by every client this process
    makes. Why: each session parses botocore's JSON models (S3's, the endpoint rules) anew, 0.1-0.5 s
    of CPU on a loaded machine, and the read side makes two clients (the boto3 one and the direct
    path's signer) per fetcher; the parsed models are read-only, so one loader serves them all."""
    import botocore.loaders
    import botocore.session

    global _LOADER
    session = botocore.session.get_session()
    with _LOADER_LOCK:
        if _LOADER is None:
            _LOADER = botocore.loaders.create_loader(session.get_config_variable("data_path"))
        session.register_component("data_loader", _LOADER)
    return session


def _reveal(secret: SecretStr | None) -> str | None:
    return secret.get_secret_value() if secret is not None else None


def _total_size(resp: Mapping[str, Any], start: int, what: str) -> int:
    """Object size from ``Content-Range: bytes <start>-e/total``; a reply that is not the asked
    range (a server ignoring ``Range``) is an error rather than misplaced bytes."""
    content_range = str(resp.get("ContentRange") or "")
    if content_range.startswith(f"bytes {start}-") and "/" in content_range:
        total = content_range.rsplit("/", 1)[1]
        if total.isdigit():
            return int(total)
    if not content_range and start == 0:
        return int(resp["ContentLength"])  # whole object returned for bytes=0-...
    resp["Body"].close()
    raise RemoteStorageError(
        f"{what}: asked for a range from byte {start}, got Content-Range {content_range!r}", retriable=True
    )


__all__ = ["S3Config", "S3RemoteStorageManager", "client_error_code"]
