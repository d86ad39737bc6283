"""Moving bytes to and from S3: single and multipart uploads, and ranged downloads in parallel.

Uploads read the local file sequentially on the calling thread (so the CRC-32C is computed in
order and the disk sees one sequential reader) and hand each part to a pool for upload, with at
most ``concurrency`` parts in memory. A failed multipart upload is aborted, so no part is billed
or becomes visible.

Large reads are split into ranged GETs of ``chunk_size`` bytes: the first response is streamed
as it arrives while up to ``concurrency`` following chunks download in parallel, and the caller
reads everything in order. Every GET after the first carries ``If-Match`` with the first ETag,
so an object replaced in the middle of a read fails loudly instead of mixing two versions.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from rlm.errors import RemoteStorageError

from .integrity import Crc32c, FileChecksum, crc32c, crc32c_combine
from .s3_errors import map_error, with_retries


@dataclass
class Uploader:
    """Uploads one local file or bytes to ``bucket``; ``client`` is a boto3 S3 client."""

    client: Any
    bucket: str
    pool: ThreadPoolExecutor
    open_source: Callable[[Path], BinaryIO]
    extra_args: dict[str, str] = field(default_factory=dict)
    multipart_threshold: int = 32 << 20
    part_size: int = 16 << 20
    concurrency: int = 8

    def upload(self, key: str, *, path: Path | None = None, data: bytes | None = None) -> FileChecksum:
        if data is not None:
            return self._put(key, data)
        assert path is not None
        size = path.stat().st_size
        if size <= self.multipart_threshold:
            with self.open_source(path) as f:
                blob = _read_exactly(f, size, path)
            return self._put(key, blob)
        return self._multipart(key, path, size)

    def _put(self, key: str, blob: bytes) -> FileChecksum:
        crc = Crc32c()
        crc.update(blob)
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=blob, **self.extra_args)
        except Exception as e:
            raise map_error(e, self.bucket, key, "PutObject") from e
        return crc.result()

    def _multipart(self, key: str, path: Path, size: int) -> FileChecksum:
        try:
            upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=key, **self.extra_args)[
                "UploadId"
            ]
        except Exception as e:
            raise map_error(e, self.bucket, key, "CreateMultipartUpload") from e
        crc = Crc32c()
        slots = threading.BoundedSemaphore(self.concurrency)
        futures: list[Future[dict[str, Any]]] = []
        try:
            with self.open_source(path) as f:
                for number, offset in enumerate(range(0, size, self.part_size), start=1):
                    n = min(self.part_size, size - offset)
                    blob = _read_exactly(f, n, path)
                    crc.update(blob)
                    slots.acquire()
                    if any(fut.done() and fut.exception() for fut in futures):
                        slots.release()
                        break  # a part failed: stop reading, the loop below raises its error
                    fut = self.pool.submit(self._part, key, upload_id, number, blob)
                    fut.add_done_callback(lambda _f: slots.release())
                    futures.append(fut)
            parts = [fut.result() for fut in futures]
            if crc.size != size:
                raise RemoteStorageError(f"{path}: read {crc.size} bytes, expected {size}", retriable=True)
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException as e:
            for fut in futures:
                fut.cancel()
            for fut in futures:
                if not fut.cancelled():
                    fut.exception()  # wait: abort must not race a part still being sent
            self.abort(key, upload_id)
            if isinstance(e, Exception):
                raise map_error(e, self.bucket, key, "multipart upload") from e
            raise
        return crc.result()

    def _part(self, key: str, upload_id: str, number: int, blob: bytes) -> dict[str, Any]:
        resp = self.client.upload_part(
            Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=blob
        )
        return {"ETag": resp["ETag"], "PartNumber": number}

    def abort(self, key: str, upload_id: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except Exception as e:  # the caller's error matters more; a lifecycle rule can sweep leftovers
            from .s3_errors import log

            log.warning("s3_abort_failed", bucket=self.bucket, key=key, upload_id=upload_id, error=str(e))


def _read_exactly(f: BinaryIO, n: int, path: Path) -> bytes:
    parts: list[bytes] = []
    left = n
    while left > 0:
        chunk = f.read(left)
        if not chunk:
            raise RemoteStorageError(
                f"{path}: file ended {left} bytes early (changed while copying?)", retriable=True
            )
        parts.append(chunk)
        left -= len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _read_body_exactly(body: Any, buf: bytearray, n: int, what: str, start: int) -> None:
    """Read a response body of ``n`` bytes into ``buf[:n]`` (no chunk joins, no new memory)."""
    view = memoryview(buf)
    pos = 0
    while pos < n:
        got = int(body.readinto(view[pos:]) or 0)
        if not got:
            raise RemoteStorageError(
                f"{what}: range {start}-{start + n - 1} ended after {pos} bytes", retriable=True
            )
        pos += got


class ChunkedBody:
    """Bytes ``[first_stop, stop)`` of an object fetched as parallel ranged GETs, after a first
    streamed body covering ``[start, first_stop)``. Read in order with :meth:`read`."""

    def __init__(
        self,
        first_body: Any,
        first_len: int,
        *,
        client: Any,
        bucket: str,
        key: str,
        etag: str | None,
        first_stop: int,
        stop: int,
        chunk_size: int,
        pool: ThreadPoolExecutor,
        concurrency: int,
        attempts: int,
    ) -> None:
        self._body = first_body
        self._left = first_len
        self._client, self._bucket, self._key, self._etag = client, bucket, key, etag
        self._ranges = collections.deque(
            (s, min(s + chunk_size, stop)) for s in range(first_stop, stop, chunk_size)
        )
        self._futures: collections.deque[Future[tuple[memoryview, int]]] = collections.deque()
        self._chunk_size = chunk_size
        # buffers are recycled: fresh multi-MiB allocations cost page faults on every chunk
        self._free: list[bytearray] = []
        self._current: bytearray | None = None
        self._pool = pool
        self._concurrency = max(1, concurrency)
        self._attempts = attempts
        self._buf = memoryview(b"")
        self._crc = Crc32c()  # of the bytes handed out so far; chunks are checksummed by their thread
        self._fill()

    def _fill(self) -> None:
        while self._ranges and len(self._futures) < self._concurrency:
            s, e = self._ranges.popleft()
            buf = self._free.pop() if self._free else bytearray(self._chunk_size)
            self._futures.append(self._pool.submit(self._get, s, e, buf))

    def _get(self, start: int, stop: int, buf: bytearray) -> tuple[memoryview, int]:
        def once() -> tuple[memoryview, int]:
            extra = {"IfMatch": self._etag} if self._etag else {}
            resp = self._client.get_object(
                Bucket=self._bucket, Key=self._key, Range=f"bytes={start}-{stop - 1}", **extra
            )
            body = resp["Body"]
            if not str(resp.get("ContentRange", "")).startswith(f"bytes {start}-"):
                body.close()
                raise RemoteStorageError(
                    f"s3://{self._bucket}/{self._key}: asked for bytes {start}-{stop - 1}, "
                    f"got Content-Range {resp.get('ContentRange')!r}",
                    retriable=True,
                )
            try:
                _read_body_exactly(body, buf, stop - start, f"s3://{self._bucket}/{self._key}", start)
            finally:
                body.close()
            chunk = memoryview(buf)[: stop - start]
            return chunk, crc32c(chunk)  # in this pool thread: the C call releases the GIL

        return with_retries(
            once, bucket=self._bucket, key=self._key, action="GetObject", attempts=self._attempts
        )

    def readinto(self, b: bytearray | memoryview) -> int:
        """Fill ``b`` from the streamed first range, then from the parallel chunks in order."""
        view = memoryview(b).cast("B")
        if self._left > 0:
            n = int(self._body.readinto(view[: min(len(view), self._left)]) or 0)
            self._left -= n
            self._crc.update(view[:n])
            return n
        if not self._buf:
            if self._current is not None:
                self._free.append(self._current)
                self._current = None
            if not self._futures:
                return 0
            fut = self._futures.popleft()
            chunk, chunk_crc = fut.result()
            self._current = chunk.obj  # type: ignore[assignment]
            self._buf = chunk
            self._fill()
            self._crc.value = crc32c_combine(self._crc.value, chunk_crc, len(chunk))
            self._crc.size += len(chunk)
        take = min(len(view), len(self._buf))
        view[:take] = self._buf[:take]
        self._buf = self._buf[take:]
        return take

    def running_checksum(self) -> FileChecksum:
        """CRC-32C and size of everything read so far (whole chunks are counted when they become
        current, so it is exact once the reader reached the end)."""
        return self._crc.result()

    def read(self, n: int = -1) -> bytes:
        buf = bytearray(n if n >= 0 else max(self._left, len(self._buf), 1 << 20))
        got = self.readinto(buf)
        return bytes(buf[:got])

    def close(self) -> None:
        for fut in self._futures:
            fut.cancel()
        self._futures.clear()
        self._ranges.clear()
        self._body.close()
