"""``s3`` plugin behaviour beyond the contract: key layout, aborted multipart uploads, error mapping,
storage class/SSE, recorded location, integrity of stored objects, secrets never shown."""

from __future__ import annotations

import base64
import io
import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import google_crc32c
import pytest
import structlog.testing
from botocore.exceptions import ClientError, EndpointConnectionError

import rsm_plugins
from rlm.errors import (
    ConfigError,
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageIntegrityError,
)
from rlm.types import IndexType
from rsm_plugins import integrity, layout
from rsm_plugins.layout import SegmentFileType
from rsm_plugins.s3 import S3RemoteStorageManager
from rsm_plugins.s3_errors import map_error, with_retries
from rsm_plugins.testing import FaultInjectingRSM, SegmentFactory, finished, read_all
from tests.rsm.test_s3_contract import s3_config
from tests.services.s3 import SECRET_KEY, S3Endpoint

MiB = 1 << 20


@pytest.fixture
def segments(tmp_path: Path) -> SegmentFactory:
    return SegmentFactory(tmp_path / "segments")


@pytest.fixture
def moto_rsm(moto_server: S3Endpoint, moto_bucket: str) -> Iterator[S3RemoteStorageManager]:
    plugin = rsm_plugins.load("s3", s3_config(moto_server, moto_bucket))
    assert isinstance(plugin, S3RemoteStorageManager)
    yield plugin
    plugin.close()


def keys(server: S3Endpoint, bucket: str) -> list[str]:
    resp = server.boto3_client().list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in resp.get("Contents", []))


@pytest.mark.s3
def test_key_layout(
    moto_rsm: S3RemoteStorageManager, moto_server: S3Endpoint, moto_bucket: str, segments: SegmentFactory
) -> None:
    seg = segments.make(1000, partition=7, start_offset=42, topic="orders.v1")
    moto_rsm.copy_log_segment_data(seg.metadata, seg.data)
    tid, sid = seg.metadata.topic_id_partition.topic_id.text, seg.metadata.remote_log_segment_id.id.text
    base = f"tiered/orders.v1-{tid}/7/00000000000000000042-{sid}"
    assert keys(moto_server, moto_bucket) == sorted(
        base + s
        for s in (".log", ".index", ".timeindex", ".txnindex", ".leader_epoch_checkpoint", ".snapshot")
    )


@pytest.mark.s3
def test_failed_multipart_upload_is_aborted(
    s3_server: S3Endpoint, s3_bucket: str, segments: SegmentFactory
) -> None:
    rsm = rsm_plugins.load("s3", s3_config(s3_server, s3_bucket))
    seg = segments.make(16 * MiB)
    faulty = FaultInjectingRSM(rsm)
    faulty.fail_source_read(SegmentFileType.SEGMENT, after_bytes=12 * MiB)  # after two 5 MiB parts
    with pytest.raises(RemoteStorageError) as ei:
        faulty.copy_log_segment_data(seg.metadata, seg.data)
    assert ei.value.retriable
    client = s3_server.boto3_client()
    assert client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []
    assert keys(s3_server, s3_bucket) == []
    rsm.close()


def _open_uploads(server: S3Endpoint, bucket: str) -> list[str]:
    return sorted(
        u["Key"] for u in server.boto3_client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    )


def _slow_down(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "SlowDown", "Message": "Please reduce"}}, operation)


@pytest.mark.s3
def test_an_upload_whose_abort_was_refused_is_aborted_by_the_cleanup(
    moto_server: S3Endpoint, moto_bucket: str, segments: SegmentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy fails mid multipart upload and the store refuses its abort (503 SlowDown): the
    copy's cleanup (the segment's delete) finds the upload still open and aborts it."""
    rsm = rsm_plugins.load("s3", s3_config(moto_server, moto_bucket))
    assert isinstance(rsm, S3RemoteStorageManager)
    seg = segments.make(16 * MiB)
    real_abort = rsm.client.abort_multipart_upload
    refused: list[str] = []

    def abort_refused_once(**kw: Any) -> Any:
        if not refused:
            refused.append(kw["Key"])
            raise _slow_down("AbortMultipartUpload")
        return real_abort(**kw)

    monkeypatch.setattr(rsm.client, "abort_multipart_upload", abort_refused_once)
    faulty = FaultInjectingRSM(rsm)
    faulty.fail_source_read(SegmentFileType.SEGMENT, after_bytes=12 * MiB)
    with pytest.raises(RemoteStorageError):
        faulty.copy_log_segment_data(seg.metadata, seg.data)
    assert refused == [rsm.key(seg.metadata, SegmentFileType.SEGMENT)]
    assert _open_uploads(moto_server, moto_bucket) == []
    assert keys(moto_server, moto_bucket) == []
    rsm.close()


@pytest.mark.s3
def test_delete_aborts_only_the_segments_own_open_uploads(
    moto_rsm: S3RemoteStorageManager, moto_server: S3Endpoint, moto_bucket: str, segments: SegmentFactory
) -> None:
    """Uploads left open for a segment's objects (an abort refused until the cleanup gave up
    too) are aborted by its delete; another segment's, even one whose key starts the same, is not."""
    seg = segments.make(1000, start_offset=42)
    other = segments.make(1000, start_offset=42)  # same partition and offset: the keys differ by id only
    moto_rsm.copy_log_segment_data(seg.metadata, seg.data)
    client = moto_server.boto3_client()
    left = [moto_rsm.key(seg.metadata, ft) for ft in (SegmentFileType.SEGMENT, SegmentFileType.OFFSET_INDEX)]
    kept = moto_rsm.key(other.metadata, SegmentFileType.SEGMENT)
    for key in [*left, kept]:
        upload = client.create_multipart_upload(Bucket=moto_bucket, Key=key)
        client.upload_part(
            Bucket=moto_bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1024
        )
    assert _open_uploads(moto_server, moto_bucket) == sorted([*left, kept])
    moto_rsm.delete_log_segment_data(seg.metadata)
    assert _open_uploads(moto_server, moto_bucket) == [kept]
    assert keys(moto_server, moto_bucket) == []
    moto_rsm.delete_log_segment_data(seg.metadata)  # again: nothing left, nothing fails


@pytest.mark.s3
def test_delete_when_open_uploads_cannot_be_listed(
    moto_rsm: S3RemoteStorageManager,
    moto_server: S3Endpoint,
    moto_bucket: str,
    segments: SegmentFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The listing refused by policy (AccessDenied): the delete still succeeds and says so once;
    refused with a retriable error (SlowDown): the delete fails retriably, to be repeated."""
    seg = segments.make(1000)
    moto_rsm.copy_log_segment_data(seg.metadata, seg.data)
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "ListMultipartUploads")
    answer: list[ClientError] = [_slow_down("ListMultipartUploads")]

    def listing(**kw: Any) -> Any:
        raise answer[0]

    monkeypatch.setattr(moto_rsm.client, "list_multipart_uploads", listing)
    with pytest.raises(RemoteStorageError) as ei:
        moto_rsm.delete_log_segment_data(seg.metadata)
    assert ei.value.retriable and "SlowDown" in str(ei.value)
    answer[0] = denied
    with structlog.testing.capture_logs() as logs:
        moto_rsm.delete_log_segment_data(seg.metadata)
        moto_rsm.delete_log_segment_data(seg.metadata)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["s3_multipart_listing_refused"]
    assert keys(moto_server, moto_bucket) == []


@pytest.mark.s3
def test_missing_bucket_names_the_bucket(moto_server: S3Endpoint, segments: SegmentFactory) -> None:
    rsm = rsm_plugins.load("s3", s3_config(moto_server, "no-such-bucket-rlm"))
    seg = segments.make(100)
    with pytest.raises(RemoteStorageError, match="bucket 'no-such-bucket-rlm' does not exist") as ei:
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert not ei.value.retriable
    with pytest.raises(RemoteStorageError, match="no-such-bucket-rlm"):
        rsm.fetch_log_segment(seg.metadata, 0)
    rsm.close()


@pytest.mark.s3
def test_storage_class_and_sse(moto_server: S3Endpoint, moto_bucket: str, segments: SegmentFactory) -> None:
    rsm = rsm_plugins.load(
        "s3",
        s3_config(
            moto_server, moto_bucket, storage_class="STANDARD_IA", sse="AES256", multipart_threshold=5 * MiB
        ),
    )
    seg = segments.make(6 * MiB)  # the .log goes multipart, the rest single PUTs
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    client = moto_server.boto3_client()
    for key in keys(moto_server, moto_bucket):
        head = client.head_object(Bucket=moto_bucket, Key=key)
        assert head.get("StorageClass") == "STANDARD_IA", key
        assert head.get("ServerSideEncryption") == "AES256", key
    rsm.close()


@pytest.mark.s3
def test_reader_uses_recorded_location(
    moto_server: S3Endpoint, moto_bucket: str, segments: SegmentFactory
) -> None:
    writer = rsm_plugins.load("s3", s3_config(moto_server, moto_bucket, prefix="writer/"))
    seg = segments.make(2000)
    md = finished(seg.metadata, writer.copy_log_segment_data(seg.metadata, seg.data))
    manifest = integrity.decode(md.custom_metadata)
    assert manifest is not None and manifest.location == f"{moto_bucket}/writer/"
    reader = rsm_plugins.load("s3", s3_config(moto_server, "some-other-bucket", prefix="elsewhere/"))
    assert read_all(reader.fetch_log_segment(md, 0)) == seg.log
    guessing = rsm_plugins.load(
        "s3", s3_config(moto_server, moto_bucket, prefix="elsewhere/", use_recorded_location=False)
    )
    with pytest.raises(RemoteResourceNotFoundError):
        guessing.fetch_log_segment(md, 0)
    for p in (writer, reader, guessing):
        p.close()


@pytest.mark.s3
def test_corrupted_object_is_detected(
    s3_server: S3Endpoint, s3_bucket: str, segments: SegmentFactory
) -> None:
    rsm = rsm_plugins.load("s3", s3_config(s3_server, s3_bucket))
    assert isinstance(rsm, S3RemoteStorageManager)
    seg = segments.make(3 * MiB)
    md = finished(seg.metadata, rsm.copy_log_segment_data(seg.metadata, seg.data))
    client = s3_server.boto3_client()
    bad = bytearray(seg.log)
    bad[2 * MiB + 5] ^= 0xFF
    client.put_object(Bucket=s3_bucket, Key=rsm.key(md, SegmentFileType.SEGMENT), Body=bytes(bad))
    truncated = seg.contents[SegmentFileType.OFFSET_INDEX][:-8]
    client.put_object(Bucket=s3_bucket, Key=rsm.key(md, SegmentFileType.OFFSET_INDEX), Body=truncated)
    with pytest.raises(RemoteStorageIntegrityError, match="checksum mismatch"):
        read_all(rsm.fetch_log_segment(md, 0))
    with pytest.raises(RemoteStorageIntegrityError, match="size"):
        read_all(rsm.fetch_index(md, IndexType.OFFSET))
    assert read_all(rsm.fetch_log_segment(md, 10)) == bytes(bad[10:])  # ranges are not checked
    unchecked = rsm_plugins.load("s3", s3_config(s3_server, s3_bucket, verify_checksums=False))
    assert read_all(unchecked.fetch_log_segment(md, 0)) == bytes(bad)
    rsm.close()
    unchecked.close()


@pytest.mark.s3
def test_secrets_never_shown(
    moto_server: S3Endpoint, moto_bucket: str, segments: SegmentFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    rsm = rsm_plugins.load("s3", s3_config(moto_server, moto_bucket, session_token="tok-secret-123"))
    assert isinstance(rsm, S3RemoteStorageManager)
    seg = segments.make(100)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert SECRET_KEY not in repr(rsm.config) and "tok-secret-123" not in str(rsm.config)
    with pytest.raises(ConfigError) as ei:
        rsm_plugins.load(
            "s3",
            s3_config(moto_server, moto_bucket, secret_access_key=SECRET_KEY, part_size=1, bogus_key="x"),
        )
    assert SECRET_KEY not in str(ei.value)
    assert "part_size" in str(ei.value) and "bogus_key" in str(ei.value)
    out = capsys.readouterr()
    assert SECRET_KEY not in out.out + out.err and "tok-secret-123" not in out.out + out.err
    rsm.close()


@pytest.mark.s3
def test_unconfigured_and_invalid_ranges(moto_rsm: S3RemoteStorageManager, segments: SegmentFactory) -> None:
    seg = segments.make(1000)
    md = finished(seg.metadata, moto_rsm.copy_log_segment_data(seg.metadata, seg.data))
    with pytest.raises(RemoteRangeError, match="1000"):
        moto_rsm.fetch_log_segment(md, 1000)
    with pytest.raises(RemoteStorageError, match="before configure"):
        S3RemoteStorageManager().fetch_log_segment(md, 0)


# ---- error mapping and retries (no server needed) ---------------------------------------------
def client_error(code: str, status: int) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "GetObject")


@pytest.mark.parametrize(
    ("code", "status", "cls", "retriable"),
    [
        ("NoSuchKey", 404, RemoteResourceNotFoundError, False),
        ("404", 404, RemoteResourceNotFoundError, False),
        ("NoSuchBucket", 404, RemoteStorageError, False),
        ("InvalidRange", 416, RemoteRangeError, False),
        ("SlowDown", 503, RemoteStorageError, True),
        ("InternalError", 500, RemoteStorageError, True),
        ("Throttling", 400, RemoteStorageError, True),
        ("AccessDenied", 403, RemoteStorageError, False),
    ],
)
def test_client_error_mapping(code: str, status: int, cls: type[RemoteStorageError], retriable: bool) -> None:
    err = map_error(client_error(code, status), "b", "k", "GetObject")
    assert type(err) is cls
    assert err.retriable is retriable
    assert "s3://b/k" in str(err)


def test_connection_errors_are_retriable() -> None:
    err = map_error(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), "b", "k", "PutObject")
    assert err.retriable and type(err) is RemoteStorageError


def test_with_retries_retries_only_retriable() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise client_error("SlowDown", 503)
        return "ok"

    assert with_retries(flaky, bucket="b", key="k", action="t", attempts=5, base_delay=0.001) == "ok"
    assert len(calls) == 3

    def missing() -> str:
        calls.append(1)
        raise client_error("NoSuchKey", 404)

    calls.clear()
    with pytest.raises(RemoteResourceNotFoundError):
        with_retries(missing, bucket="b", key="k", action="t", attempts=5, base_delay=0.001)
    assert len(calls) == 1


@pytest.mark.s3
def test_stream_read_error_is_typed(moto_rsm: S3RemoteStorageManager, segments: SegmentFactory) -> None:
    seg = segments.make(5000)
    md = finished(seg.metadata, moto_rsm.copy_log_segment_data(seg.metadata, seg.data))
    f = moto_rsm.fetch_log_segment(md, 0)
    raw: Any = f.raw  # type: ignore[attr-defined]

    class Broken(io.RawIOBase):
        def readinto(self, b: Any) -> int:
            raise ConnectionResetError("peer reset")

    raw._inner = Broken()
    with pytest.raises(RemoteStorageError, match="peer reset") as ei:
        f.read()
    assert ei.value.retriable
    f.close()


def test_custom_metadata_fits_with_long_prefix(tmp_path: Path) -> None:
    sums = {ft: integrity.FileChecksum(0xFFFFFFFF, 2**31 - 1) for ft in SegmentFileType}
    blob = integrity.encode(
        integrity.SegmentManifest(integrity.LayoutCode.S3, sums, "b" * 63 + "/" + "p" * 300)
    )
    assert len(blob) <= 128
    manifest = integrity.decode(blob)
    assert manifest is not None and manifest.location is None and manifest.files == sums
    assert re.fullmatch(rb"\xa5\x01\x02\x7f.*", blob, re.S)  # bits of all 7 file types
    assert replace(manifest, location="x").location == "x"


@pytest.mark.s3
def test_index_files_upload_while_the_segment_uploads(
    moto_rsm: S3RemoteStorageManager, moto_server: S3Endpoint, moto_bucket: str, segments: SegmentFactory
) -> None:
    """The offset index's upload can only finish once the segment's own upload has started
    reading: copies that upload the index files before the segment wait for ever (bounded here:
    the gate gives up and the copy fails), copies that overlap them land every object."""
    seg = segments.make(12 * MiB)  # multipart: the segment's parts are read by pool threads
    segment_started = threading.Event()
    gave_up: list[str] = []
    plain_open = moto_rsm.open_source

    def gated_open(path: Path) -> Any:
        if Path(path) == seg.data.log_segment:
            segment_started.set()
        elif Path(path) == seg.data.offset_index and not segment_started.wait(60):
            gave_up.append(str(path))
            raise OSError("the segment's upload never started while its offset index was uploading")
        return plain_open(path)

    moto_rsm.open_source = gated_open  # type: ignore[method-assign]
    custom = moto_rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert gave_up == []
    landed = keys(moto_server, moto_bucket)
    assert len(landed) == 6 and any(k.endswith(".log") for k in landed)
    got = read_all(moto_rsm.fetch_log_segment(finished(seg.metadata, custom), 0))
    assert got == seg.data.log_segment.read_bytes()


@pytest.mark.s3
def test_failed_index_upload_leaves_nothing_while_the_segment_was_in_flight(
    s3_server: S3Endpoint, s3_bucket: str, segments: SegmentFactory
) -> None:
    """An index file fails while the segment's multipart upload is running beside it: the copy
    raises the typed error, and once it returns no object and no multipart upload is left (the
    clean-up waits for everything of the copy still in flight before deleting)."""
    rsm = rsm_plugins.load("s3", s3_config(s3_server, s3_bucket))
    seg = segments.make(16 * MiB)
    faulty = FaultInjectingRSM(rsm)
    faulty.fail_source_read(SegmentFileType.TIME_INDEX, after_bytes=0)
    with pytest.raises(RemoteStorageError) as ei:
        faulty.copy_log_segment_data(seg.metadata, seg.data)
    assert ei.value.retriable
    assert s3_server.boto3_client().list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []
    assert keys(s3_server, s3_bucket) == []
    rsm.close()


@pytest.mark.s3
@pytest.mark.parametrize("send", [True, False], ids=["checksums", "no-checksums"])
def test_uploads_carry_the_crc32c_computed_while_reading(
    s3_server: S3Endpoint, s3_bucket: str, segments: SegmentFactory, send: bool
) -> None:
    """Every PUT and every part of the segment's multipart upload carries the CRC-32C of exactly
    its bytes (checked here against the source file, independently), the upload is created as a
    CRC-32C one and CompleteMultipartUpload lists the parts' checksums, so the store checks what it
    received and needs no full-object checksum of its own; the copy reads back equal. With
    ``upload_checksums: false`` (a store that rejects checksum headers) none is sent."""
    rsm = rsm_plugins.load("s3", s3_config(s3_server, s3_bucket, upload_checksums=send))
    assert isinstance(rsm, S3RemoteStorageManager)
    seg = segments.make(13 * MiB)  # three 5 MiB parts, the last one short
    sent: list[tuple[str, str, dict[str, str], bytes]] = []

    def record(request: Any, event_name: str, **_: Any) -> None:
        body = request.body
        raw = bytes(body) if isinstance(body, (bytes, bytearray)) else body.getvalue() if body else b""
        headers = {
            k.lower(): v.decode() if isinstance(v, bytes) else str(v) for k, v in request.headers.items()
        }
        sent.append((event_name.rsplit(".", 1)[-1], request.url, headers, raw))

    rsm.client.meta.events.register("before-send.s3.*", record)
    try:
        md = finished(seg.metadata, rsm.copy_log_segment_data(seg.metadata, seg.data))
        assert read_all(rsm.fetch_log_segment(md, 0)) == seg.log
    finally:
        rsm.close()

    def b64crc(data: bytes) -> str:
        return base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()

    parts = [(url, h) for op, url, h, _ in sent if op == "UploadPart"]
    assert len(parts) == 3
    if not send:
        assert not [h for _, _, h, _ in sent if any(k.startswith("x-amz-checksum") for k in h)]
        return
    for url, h in parts:
        number = int(re.search(r"partNumber=(\d+)", url).group(1))  # type: ignore[union-attr]
        start = (number - 1) * 5 * MiB
        assert h["x-amz-checksum-crc32c"] == b64crc(seg.log[start : start + 5 * MiB])
    (create,) = [h for op, _, h, _ in sent if op == "CreateMultipartUpload"]
    assert create["x-amz-checksum-algorithm"] == "CRC32C"
    (complete,) = [body for op, _, _, body in sent if op == "CompleteMultipartUpload"]
    assert complete.count(b"<ChecksumCRC32C>") == 3
    puts = [(h, body) for op, _, h, body in sent if op == "PutObject"]
    assert len(puts) == len(layout.source_files(seg.data)) - 1  # every file but the .log
    assert all(h["x-amz-checksum-crc32c"] == b64crc(body) for h, body in puts)
