"""What SeaweedFS stores and spends per read for compressible vs incompressible objects (not a test).

Why: on the Kafka endpoint benchmark SeaweedFS, on the same core as the endpoint, spends more CPU
serving the tiered bytes than the broker's whole serving side. SeaweedFS gzips a chunk on upload
when its first 128 bytes compress (an unknown or ``application/octet-stream`` type) and un-gzips
it on every read; the endpoint benchmark's records (repeated digits, as many uncompressed topics
are) are that kind. This probe shows the size of that part of SeaweedFS's CPU.

Starts SeaweedFS (``weed mini``, as the tests do), uploads two objects of ``--size-mb`` with 8 MiB
multipart parts — the endpoint benchmark's record values (compressible) and random bytes — then,
in ``--rounds`` interleaved rounds, reads each back as 8 MiB ranged GETs (boto3), every byte
checked, and prints the bytes SeaweedFS stored for each and its CPU seconds per 256 MiB read.

    .venv/bin/python benchmarks/probe_seaweedfs_compression.py --size-mb 64 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_kafka_endpoint import VALUE, record_value, tree_cpu_seconds  # noqa: E402

MiB = 1 << 20
PART = 8 * MiB


def record_values(size: int) -> bytes:
    """The endpoint benchmark's record values, back to back (distinct, but repeated digits)."""
    return b"".join(record_value(i) for i in range(size // VALUE + 1))[:size]


def stored_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.rglob("*.dat"))


def upload(client: Any, bucket: str, key: str, body: bytes) -> None:
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for n, i in enumerate(range(0, len(body), PART), start=1):
        etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n,
                                  Body=body[i:i + PART])["ETag"]
        parts.append({"ETag": etag, "PartNumber": n})
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                     MultipartUpload={"Parts": parts})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import boto3

    from tests.services.s3 import SeaweedFS

    size = args.size_mb * MiB
    bodies = {"record values": record_values(size), "random bytes": os.urandom(size)}
    weed = SeaweedFS(name="probe-compression").start()
    try:
        assert weed.base is not None and weed.proc is not None
        client = boto3.client("s3", endpoint_url=weed.endpoint_url, aws_access_key_id="probe",
                              aws_secret_access_key="probe", region_name="us-east-1")
        bucket = "probe-compression"
        client.create_bucket(Bucket=bucket)
        stored: dict[str, int] = {}
        for i, (name, body) in enumerate(bodies.items()):
            before = stored_bytes(weed.base / "data")
            upload(client, bucket, f"object-{i}", body)
            time.sleep(0.5)
            stored[name] = stored_bytes(weed.base / "data") - before
        cpu: dict[str, list[float]] = {name: [] for name in bodies}
        for r in range(args.rounds):
            order = list(enumerate(bodies.items()))
            for i, (name, body) in order[r % 2:] + order[:r % 2]:
                cpu0 = tree_cpu_seconds(weed.proc.pid)
                for start in range(0, size, PART):
                    got = client.get_object(Bucket=bucket, Key=f"object-{i}",
                                            Range=f"bytes={start}-{start + PART - 1}")["Body"].read()
                    if got != body[start:start + PART]:
                        raise SystemExit(f"{name}: bytes at {start} differ from what was uploaded")
                cpu[name].append((tree_cpu_seconds(weed.proc.pid) - cpu0) * 256 * MiB / size)
        for name in bodies:
            print(f"{name:14s} stored {stored[name] / MiB:6.1f} MiB of {args.size_mb}; SeaweedFS CPU per "
                  f"256 MiB read: median {statistics.median(cpu[name]):.2f} s "
                  f"(rounds: {', '.join(f'{x:.2f}' for x in cpu[name])})")
    finally:
        weed.stop()


if __name__ == "__main__":
    main()
