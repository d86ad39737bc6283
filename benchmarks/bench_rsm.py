"""Benchmark of the storage plugins (a script, not a test).

* ``s3`` plugin vs boto3's TransferManager (``upload_file``/``download_file``) on the same SeaweedFS
  server: upload and download of one segment of ``--size-mb`` MiB;
* ``local`` plugin vs a plain ``shutil.copyfile``, both directions, and (upload) vs
  ``shutil.copyfile`` + fsync, the same durability as the plugin's default;
* latency of 1 MiB range reads at random positions (s3 plugin, raw boto3 ``get_object``, local).

Usage::

    .venv/bin/python benchmarks/bench_rsm.py --size-mb 1024           # starts SeaweedFS itself
    .venv/bin/python benchmarks/bench_rsm.py --endpoint-url http://127.0.0.1:8333 --bucket b

The segment is random (incompressible) bytes. Uploads and downloads go through files on local disk
on both sides; the page cache is not dropped, so local figures mostly measure memory bandwidth.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

import rsm_plugins  # noqa: E402
from rlm.types import (  # noqa: E402
    KafkaUuid,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

MiB = 1 << 20


def write_segment(directory: Path, size: int) -> tuple[RemoteLogSegmentMetadata, LogSegmentData]:
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "00000000000000000000.log"
    with open(log, "wb") as f:
        left = size
        while left:
            n = min(left, 64 * MiB)
            f.write(os.urandom(n))
            left -= n
    aux = {}
    for suffix, n in ((".index", 80_000), (".timeindex", 120_000), (".snapshot", 2_000)):
        aux[suffix] = directory / f"00000000000000000000{suffix}"
        aux[suffix].write_bytes(os.urandom(n))
    data = LogSegmentData(log, aux[".index"], aux[".timeindex"], None, aux[".snapshot"], b"0\n1\n0 0\n")
    tp = TopicIdPartition(KafkaUuid.random(), "bench", 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), 0, 999_999, 0, 0, 0, size, ((0, 0),))
    return md, data


def copy_fsync(src: Path, dst: Path) -> None:
    """``shutil.copyfile`` then fsync of the file: the floor for the ``local`` plugin with fsync."""
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def round_robin(cases: list[tuple[str, Callable[[], Any]]], repeat: int) -> dict[str, tuple[float, float]]:
    """Best wall time of each case over ``repeat`` rounds, with the client CPU seconds of that run
    (all threads of this process). Cases are interleaved within a round so that a noisy moment
    (other processes, page-cache writeback, server housekeeping) hits all of them."""
    out: dict[str, tuple[float, float]] = {}
    for _ in range(repeat):
        for name, fn in cases:
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            if wall < out.get(name, (float("inf"), 0.0))[0]:
                out[name] = (wall, cpu)
    return out


def stream_to_file(stream: Any, path: Path) -> None:
    with stream as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst, 8 * MiB)


def latencies(fn: Callable[[int], Any], size: int, n: int) -> list[float]:
    rng = random.Random(42)
    out = []
    for _ in range(n):
        pos = rng.randrange(0, size - MiB)
        t0 = time.perf_counter()
        fn(pos)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


@contextmanager
def s3_server(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.endpoint_url:
        yield args.endpoint_url, args.bucket
        return
    from tests.services.s3 import SeaweedFS

    srv = SeaweedFS(volume_size_limit_mb=1024).start()
    try:
        yield srv.endpoint_url, srv.create_bucket("bench")
    finally:
        srv.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="segment size in MiB (default 1024)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best time of each case is shown")
    ap.add_argument("--ranged-reads", type=int, default=50, help="number of random 1 MiB reads")
    ap.add_argument("--endpoint-url", help="use this S3 server instead of starting SeaweedFS")
    ap.add_argument("--bucket", default="bench", help="bucket on --endpoint-url (must exist)")
    ap.add_argument("--skip-s3", action="store_true")
    ap.add_argument("--skip-local", action="store_true")
    args = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    size = args.size_mb * MiB
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-rsm-") as tmp_name:
        tmp = Path(tmp_name)
        md, data = write_segment(tmp / "src", size)
        print(
            f"segment: {args.size_mb} MiB, {os.cpu_count()} CPUs, python {sys.version.split()[0]}", flush=True
        )

        def mbps(t: tuple[float, float]) -> str:
            wall, cpu = t
            return f"{size / MiB / wall:8.1f} MiB/s ({wall:6.2f} s, client CPU {cpu:5.2f} s)"

        def lat_row(name: str, fn: Callable[[int], Any]) -> None:
            lat = latencies(fn, size, args.ranged_reads)
            rows.append((name, "", f"p50 {pct(lat, 0.5):6.2f} ms  p95 {pct(lat, 0.95):6.2f} ms"))

        if not args.skip_local:
            synced = rsm_plugins.load("local", {"root": str(tmp / "remote-fsync"), "fsync": True})
            unsynced = rsm_plugins.load("local", {"root": str(tmp / "remote"), "fsync": False})
            full = replace(md, custom_metadata=unsynced.copy_log_segment_data(md, data))
            shutil.copyfile(data.log_segment, tmp / "plain.log")
            times = round_robin(
                [
                    ("local plugin upload (fsync)", lambda: synced.copy_log_segment_data(md, data)),
                    ("local plugin upload (no fsync)", lambda: unsynced.copy_log_segment_data(md, data)),
                    (
                        "shutil.copyfile upload (no fsync)",
                        lambda: shutil.copyfile(data.log_segment, tmp / "p.log"),
                    ),
                    (
                        "shutil.copyfile upload + fsync (the plugin's durability)",
                        lambda: copy_fsync(data.log_segment, tmp / "pf.log"),
                    ),
                    (
                        "local plugin download (CRC-32C checked)",
                        lambda: stream_to_file(unsynced.fetch_log_segment(full, 0), tmp / "down.log"),
                    ),
                    (
                        "local plugin download (unchecked)",
                        lambda: stream_to_file(unsynced.fetch_log_segment(md, 0), tmp / "down.log"),
                    ),
                    (
                        "shutil.copyfile download",
                        lambda: shutil.copyfile(tmp / "plain.log", tmp / "down2.log"),
                    ),
                ],
                args.repeat,
            )
            rows.extend((name, mbps(t), "") for name, t in times.items())
            lat_row(
                "local plugin 1 MiB ranged read",
                lambda p: unsynced.fetch_log_segment(md, p, p + MiB - 1).read(),
            )
            synced.close()
            unsynced.close()

        if not args.skip_s3:
            import boto3
            from boto3.s3.transfer import TransferConfig
            from botocore.config import Config

            with s3_server(args) as (endpoint, bucket):
                client = boto3.client(
                    "s3",
                    endpoint_url=endpoint,
                    aws_access_key_id="bench",
                    aws_secret_access_key="bench",
                    region_name="us-east-1",
                    config=Config(
                        s3={"addressing_style": "path"},
                        max_pool_connections=32,
                        request_checksum_calculation="when_required",
                        response_checksum_validation="when_required",
                    ),
                )
                tc = TransferConfig()  # boto3 defaults: 8 MiB parts, 10 threads
                rsm = rsm_plugins.load(
                    "s3",
                    {
                        "bucket": bucket,
                        "endpoint_url": endpoint,
                        "region": "us-east-1",
                        "path_style": True,
                        "access_key_id": "bench",
                        "secret_access_key": "bench",
                        "prefix": "rsm/",
                    },
                )
                full = replace(md, custom_metadata=rsm.copy_log_segment_data(md, data))
                client.upload_file(str(data.log_segment), bucket, "plain.log", Config=tc)
                times = round_robin(
                    [
                        (
                            "boto3 upload_file (TransferManager)",
                            lambda: client.upload_file(str(data.log_segment), bucket, "plain.log", Config=tc),
                        ),
                        (
                            "s3 plugin upload (copy_log_segment_data)",
                            lambda: rsm.copy_log_segment_data(md, data),
                        ),
                        (
                            "boto3 download_file (TransferManager)",
                            lambda: client.download_file(
                                bucket, "plain.log", str(tmp / "down3.log"), Config=tc
                            ),
                        ),
                        (
                            "s3 plugin download (CRC-32C checked)",
                            lambda: stream_to_file(rsm.fetch_log_segment(full, 0), tmp / "down4.log"),
                        ),
                    ],
                    args.repeat,
                )
                rows.extend((name, mbps(t), "") for name, t in times.items())
                lat_row(
                    "s3 plugin 1 MiB ranged read", lambda p: rsm.fetch_log_segment(md, p, p + MiB - 1).read()
                )
                lat_row(
                    "boto3 get_object 1 MiB range",
                    lambda p: client.get_object(
                        Bucket=bucket, Key="plain.log", Range=f"bytes={p}-{p + MiB - 1}"
                    )["Body"].read(),
                )
                rsm.close()

    width = max(len(r[0]) for r in rows)
    print()
    for name, tput, latency in rows:
        print(f"{name:<{width}}  {tput or latency}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
