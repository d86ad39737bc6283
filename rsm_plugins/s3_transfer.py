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

import base64
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

#: S3's limit on the parts of one multipart upload.
MAX_PARTS = 10_000


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
    #: send the CRC-32C computed while reading as each PUT's and part's checksum (the store checks
    #: the bytes it received against it; no second pass, no checksum computed by botocore)
    send_checksums: bool = False

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
        sent = {"ChecksumCRC32C": _b64(crc.value)} if self.send_checksums else {}
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=blob, **self.extra_args, **sent)
        except Exception as e:
            raise map_error(e, self.bucket, key, "PutObject") from e
        return crc.result()

    def plan(self, size: int) -> tuple[int, int]:
        """(part size, parts in flight) for a file of ``size`` bytes.

        The configured part size, grown when the file would need more than S3's 10,000 parts;
        no more parts in flight than the file has (each in-flight part holds one buffer).
        """
        part = max(self.part_size, -(-size // MAX_PARTS))
        return part, max(1, min(self.concurrency, -(-size // part)))

    def _multipart(self, key: str, path: Path, size: int) -> FileChecksum:
        """Parts read, checksummed and sent by pool threads, each into a recycled buffer.

        Why not one reader: the calling thread reading every part in turn and checksumming it
        (a second pass over bytes already out of the cache), with a fresh multi-MiB ``bytes`` per
        part (page faults), made this slower than boto3's TransferManager. Now each part's thread
        reads its range (``seek`` + ``readinto`` on its own handle from :meth:`open_source`, so a
        fault injected at a file position still fires), computes the part's CRC-32C right after
        the read while the bytes are in cache, and uploads the same buffer; the whole file's CRC
        is combined from the parts' in order (:func:`crc32c_combine`). At most ``concurrency``
        buffers exist at once.

        With :attr:`send_checksums`, each part carries its CRC-32C (the upload is created as a
        CRC-32C one, so the store checks every part and CompleteMultipartUpload lists them). Why,
        besides the end-to-end check: an upload created without an algorithm gets a full-object
        CRC-64/NVME from S3 (and moto, which then copies every part twice more to compute it: a
        fifth of its CPU per upload in the tiering benchmark), while a composite of part checksums
        the client already has costs the store one pass over each part.
        """
        part_size, in_flight = self.plan(size)
        algorithm = {"ChecksumAlgorithm": "CRC32C"} if self.send_checksums else {}
        try:
            upload_id = self.client.create_multipart_upload(
                Bucket=self.bucket, Key=key, **self.extra_args, **algorithm
            )["UploadId"]
        except Exception as e:
            raise map_error(e, self.bucket, key, "CreateMultipartUpload") from e
        slots = threading.BoundedSemaphore(in_flight)
        buffers: list[bytearray] = []
        failed = threading.Event()
        futures: list[Future[tuple[dict[str, Any], int, int]]] = []

        def done(fut: Future[Any]) -> None:
            if fut.cancelled() or fut.exception() is not None:
                failed.set()
            slots.release()

        try:
            for number, offset in enumerate(range(0, size, part_size), start=1):
                slots.acquire()
                if failed.is_set():
                    slots.release()
                    break  # a part failed: read no more, the loop below raises its error
                n = min(part_size, size - offset)
                fut = self.pool.submit(self._send_part, key, upload_id, number, path, offset, n, buffers)
                fut.add_done_callback(done)
                futures.append(fut)
            crc, total, parts = 0, 0, []
            for fut in futures:
                part, part_crc, n = fut.result()
                crc, total = crc32c_combine(crc, part_crc, n), total + n
                parts.append(part)
            if total != size:
                raise RemoteStorageError(f"{path}: read {total} bytes, expected {size}", retriable=True)
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
        return FileChecksum(size=size, crc32c=crc)

    def _send_part(
        self, key: str, upload_id: str, number: int, path: Path, offset: int, n: int, buffers: list[bytearray]
    ) -> tuple[dict[str, Any], int, int]:
        """Read part ``number`` (``n`` bytes at ``offset``), checksum it, upload it; returns
        (the part for CompleteMultipartUpload, its CRC-32C, its size).

        ``buffers`` holds the full-size part buffers of this upload that no thread uses now; the
        last, shorter part gets one of its own size (botocore sends a buffer whole).
        """
        buf: bytearray | None = None
        if buffers:
            try:
                buf = buffers.pop()  # atomic: no two threads get the same buffer
            except IndexError:
                buf = None
        if buf is None or len(buf) != n:
            if buf is not None:
                buffers.append(buf)
            buf = bytearray(n)
        try:
            with self.open_source(path) as f:
                f.seek(offset)
                _readinto_exactly(f, memoryview(buf), path)
            part_crc = crc32c(buf)  # the C call releases the GIL: parts are checksummed in parallel
            sent = {"ChecksumCRC32C": _b64(part_crc)} if self.send_checksums else {}
            resp = self.client.upload_part(
                Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=buf, **sent
            )
        finally:
            buffers.append(buf)  # only now: botocore may send the body again until the call returns
        return {"ETag": resp["ETag"], "PartNumber": number, **sent}, part_crc, n

    def abort(self, key: str, upload_id: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except Exception as e:  # the caller's error matters more; a lifecycle rule can sweep leftovers
            from .s3_errors import log

            log.warning("s3_abort_failed", bucket=self.bucket, key=key, upload_id=upload_id, error=str(e))


def _b64(crc: int) -> str:
    """A CRC-32C as S3's checksum headers carry it: the 4 big-endian bytes, base64."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


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


def _readinto_exactly(f: BinaryIO, view: memoryview, path: Path) -> None:
    pos = 0
    while pos < len(view):
        got = f.readinto(view[pos:])  # type: ignore[attr-defined]
        if not got:
            raise RemoteStorageError(
                f"{path}: file ended {len(view) - pos} bytes early (changed while copying?)", retriable=True
            )
        pos += got


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
