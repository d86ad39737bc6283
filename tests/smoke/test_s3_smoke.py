"""S3 smoke tests: real servers (SeaweedFS ``weed mini`` and moto in server mode) through boto3 and s3fs."""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.services.s3 import MotoServer, S3Endpoint, SeaweedFS
from tests.smoke._sockets import non_loopback

pytestmark = pytest.mark.s3

MiB = 1024 * 1024


def test_put_get_range_list(s3_server: S3Endpoint, s3_bucket: str) -> None:
    c = s3_server.boto3_client()
    body = os.urandom(MiB + 123)
    put = c.put_object(Bucket=s3_bucket, Key="dir/obj.bin", Body=body, ContentType="application/octet-stream")
    assert put["ETag"].strip('"') == hashlib.md5(body).hexdigest()

    got = c.get_object(Bucket=s3_bucket, Key="dir/obj.bin")
    assert got["ContentLength"] == len(body)
    assert got["Body"].read() == body

    head = c.head_object(Bucket=s3_bucket, Key="dir/obj.bin")
    assert head["ContentLength"] == len(body)

    part = c.get_object(Bucket=s3_bucket, Key="dir/obj.bin", Range="bytes=1000-1999")
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert part["ContentRange"] == f"bytes 1000-1999/{len(body)}"
    assert part["Body"].read() == body[1000:2000]

    tail = c.get_object(Bucket=s3_bucket, Key="dir/obj.bin", Range="bytes=-17")
    assert tail["Body"].read() == body[-17:]

    listing = c.list_objects_v2(Bucket=s3_bucket, Prefix="dir/")
    assert [(o["Key"], o["Size"]) for o in listing["Contents"]] == [("dir/obj.bin", len(body))]

    c.delete_object(Bucket=s3_bucket, Key="dir/obj.bin")
    assert c.list_objects_v2(Bucket=s3_bucket).get("KeyCount", 0) == 0
    with pytest.raises(c.exceptions.ClientError) as e:
        c.head_object(Bucket=s3_bucket, Key="dir/obj.bin")
    assert e.value.response["Error"]["Code"] in ("404", "NoSuchKey")


def test_multipart_upload(s3_server: S3Endpoint, s3_bucket: str) -> None:
    c = s3_server.boto3_client()
    parts_data = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(MiB + 7)]
    body = b"".join(parts_data)
    up = c.create_multipart_upload(Bucket=s3_bucket, Key="mp/segment.log")
    parts = []
    for n, data in enumerate(parts_data, start=1):
        r = c.upload_part(Bucket=s3_bucket, Key="mp/segment.log", UploadId=up["UploadId"], PartNumber=n,
                          Body=data)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    done = c.complete_multipart_upload(Bucket=s3_bucket, Key="mp/segment.log", UploadId=up["UploadId"],
                                       MultipartUpload={"Parts": parts})
    assert done["ETag"].strip('"').endswith(f"-{len(parts_data)}")

    assert c.head_object(Bucket=s3_bucket, Key="mp/segment.log")["ContentLength"] == len(body)
    assert c.get_object(Bucket=s3_bucket, Key="mp/segment.log")["Body"].read() == body
    # a range across the first part boundary
    lo, hi = 5 * MiB - 100, 5 * MiB + 99
    r = c.get_object(Bucket=s3_bucket, Key="mp/segment.log", Range=f"bytes={lo}-{hi}")
    assert r["Body"].read() == body[lo:hi + 1]
    assert c.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


def test_s3fs_read_and_write(s3_server: S3Endpoint, s3_bucket: str) -> None:
    c = s3_server.boto3_client()
    body = os.urandom(300_000)
    c.put_object(Bucket=s3_bucket, Key="a/b/data.bin", Body=body)

    fs = s3_server.s3fs_filesystem()
    assert fs.info(f"{s3_bucket}/a/b/data.bin")["size"] == len(body)
    assert fs.cat_file(f"{s3_bucket}/a/b/data.bin") == body
    assert fs.cat_file(f"{s3_bucket}/a/b/data.bin", start=4096, end=8192) == body[4096:8192]
    with fs.open(f"{s3_bucket}/a/b/data.bin", "rb", block_size=64 * 1024) as f:
        f.seek(250_000)
        assert f.read(10_000) == body[250_000:260_000]
    assert fs.ls(f"{s3_bucket}/a/b", detail=False) == [f"{s3_bucket}/a/b/data.bin"]

    # written through s3fs, read back through boto3
    fs.pipe_file(f"{s3_bucket}/a/written.txt", b"written by s3fs")
    assert c.get_object(Bucket=s3_bucket, Key="a/written.txt")["Body"].read() == b"written by s3fs"


def test_seaweedfs_is_loopback_only(seaweedfs: SeaweedFS) -> None:
    assert seaweedfs.proc is not None and seaweedfs.proc.poll() is None
    assert seaweedfs.endpoint_url.startswith("http://127.0.0.1:")
    assert non_loopback(seaweedfs.proc.pid) == []
    cmd = seaweedfs.command()
    assert "-master.telemetry=false" in cmd and "-admin.ui=false" in cmd and "-webdav=false" in cmd


def test_moto_server_reset(moto_server: MotoServer) -> None:
    """``reset()`` really drops state.

    moto keeps its backends per process, so every in-process server shares one state: the
    assertions look only at this test's own bucket, which must exist before and be gone after.
    """
    bucket = moto_server.create_bucket("reset")
    moto_server.boto3_client().put_object(Bucket=bucket, Key="k", Body=b"v")
    assert bucket in [b["Name"] for b in moto_server.boto3_client().list_buckets()["Buckets"]]
    moto_server.reset()
    assert bucket not in [b["Name"] for b in moto_server.boto3_client().list_buckets()["Buckets"]]
