"""Benchmark of the storage plugins on their own (a script, not a test).

One segment of ``--size-mb`` MiB of random (incompressible) bytes plus small index files; in
interleaved rounds (one warm-up, then ``--rounds``), section by section:

* ``s3 upload``: the ``s3`` plugin's ``copy_log_segment_data`` (every part's CRC-32C sent, the
  store verifies it) vs boto3's TransferManager ``upload_file`` (default ``TransferConfig``: 8 MiB
  parts, 10 threads) twice: with no checksum (``request_checksum_calculation=when_required``, the
  least work for client and store) and with botocore's default (``when_supported``: a CRC-32 per
  part, streamed as a trailer and verified by the store: the same check as the plugin's); same
  SeaweedFS server (``weed mini``, started by the script on 127.0.0.1 unless ``--endpoint-url``);
  goal: at least boto3's rate, each;
* ``s3 download``: ``fetch_log_segment(md, 0)`` streamed to a file as ``rlm restore`` does
  (``rsm_plugins.streams.copy_to``: one reused buffer), CRC-32C checked, vs
  ``download_file``; goal: at least boto3's rate;
* ``local upload``: the ``local`` plugin with ``fsync: true`` vs ``shutil.copyfile`` + fsync (the
  same durability; goal: within 1.2x), and without fsync vs a bare ``shutil.copyfile`` (context);
* ``local download``: the plugin's stream (CRC-32C checked, and unchecked) vs ``shutil.copyfile``;
* ``range reads``: ``--ranged-reads`` reads of 1 MiB at random positions through the ``s3``
  plugin, raw boto3 ``get_object(Range=...)`` and the ``local`` plugin (p50/p99 of every read).

Every transfer is checked by content: after each upload (untimed) the landed ``.log`` is read
back — the object with a plain ``get_object``, the file from disk — and its digest must equal the
source's; every download's file, and the concatenation of every round's range reads, likewise.
A mismatch fails the benchmark (exit 2). Reported: the median of per-round rate ratios; every
round (wall time, this process's CPU time, MB/s) in ``docs/data/bench-rsm.json``.

    .venv/bin/python benchmarks/bench_rsm.py --size-mb 1024           # starts SeaweedFS itself
    .venv/bin/python benchmarks/bench_rsm.py --endpoint-url http://127.0.0.1:8333 --bucket b

Uploads and downloads go through files on local disk on both sides; the page cache is not dropped,
so the local figures mostly measure memory bandwidth.
"""

from __future__ import annotations

import argparse
import hashlib
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
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    Recorder,
    Result,
    file_digest,
    headline,
    latency_summary,
    quiet_logs,
    run_rounds,
    sized_name,
)

MiB = 1 << 20
#: the documented default size (``bench-rsm.json``; any other size: ``bench-rsm-<n>mb.json``)
DEFAULT_SIZE_MB = 1024


def write_segment(directory: Path, size: int) -> tuple[Any, Any]:
    from rlm.types import (
        KafkaUuid,
        LogSegmentData,
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        TopicIdPartition,
    )

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


def another_segment(md: Any) -> Any:
    """The same segment under a new id: uploads in the rounds never touch the download source."""
    from rlm.types import RemoteLogSegmentId

    tp = md.remote_log_segment_id.topic_id_partition
    return replace(md, remote_log_segment_id=RemoteLogSegmentId.generate_new(tp))


def copy_fsync(src: Path, dst: Path) -> None:
    """``shutil.copyfile`` then fsync of the file: the floor for the ``local`` plugin with fsync."""
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stream_to_file(stream: Any, path: Path) -> None:
    """A plugin's stream to a file as ``rlm restore`` writes a segment (``streams.copy_to``)."""
    from rsm_plugins.streams import copy_to

    with stream as src, open(path, "wb") as dst:
        copy_to(src, dst)


def timed(size: int, fn: Callable[[], object], check: Callable[[], str],
          cleanup: Callable[[], object] = lambda: None) -> Result:
    """Wall and CPU time of ``fn`` (all threads of this process), then, untimed, the digest of what
    it landed or read (``check``) and ``cleanup``."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    digest = check()
    cleanup()
    return Result(wall, digest, size, 0, {"cpu_s": cpu, "mb_per_s": size / MiB / wall})


def range_reads(read: Callable[[int], bytes], positions: list[int], size: int) -> Result:
    """Every range in turn; the digest of their bytes in order, each read's latency kept."""
    h = hashlib.blake2b(digest_size=16)
    lat: list[float] = []
    t0 = time.perf_counter()
    for pos in positions:
        s = time.perf_counter()
        h.update(read(pos))
        lat.append((time.perf_counter() - s) * 1000)
    wall = time.perf_counter() - t0
    return Result(wall, h.hexdigest(), len(positions) * size, len(positions), {"latencies_ms": lat})


def expected_ranges(path: Path, positions: list[int], size: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for pos in positions:
            f.seek(pos)
            h.update(f.read(size))
    return h.hexdigest()


@contextmanager
def s3_server(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.endpoint_url:
        yield args.endpoint_url, args.bucket
        return
    from tests.services.s3 import SeaweedFS

    srv = SeaweedFS(name="bench-rsm", volume_size_limit_mb=max(1024, 2 * args.size_mb)).start()
    try:
        yield srv.endpoint_url, srv.create_bucket("bench")
    finally:
        srv.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=DEFAULT_SIZE_MB, help="segment size in MiB (default 1024)")
    ap.add_argument("--rounds", type=int, default=3, help="counted interleaved rounds (after one warm-up)")
    ap.add_argument("--ranged-reads", type=int, default=50, help="random 1 MiB reads per case and round")
    ap.add_argument("--endpoint-url", help="use this S3 server instead of starting SeaweedFS")
    ap.add_argument("--bucket", default="bench", help="bucket on --endpoint-url (must exist)")
    ap.add_argument("--skip-s3", action="store_true")
    ap.add_argument("--skip-local", action="store_true")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-rsm.json")
    args = ap.parse_args()
    quiet_logs()
    rec = Recorder(sized_name("rsm", args.size_mb, DEFAULT_SIZE_MB, "mb"), args)
    import rsm_plugins
    from rsm_plugins.layout import SegmentFileType

    size = args.size_mb * MiB
    rng = random.Random(42)
    positions = [rng.randrange(0, size - MiB) for _ in range(args.ranged_reads)]
    latencies: dict[str, list[float]] = {}
    range_cases: dict[str, Callable[[], Result]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-rsm-") as tmp_name:
        tmp = Path(tmp_name)
        md, data = write_segment(tmp / "src", size)
        src = data.log_segment
        want = file_digest([src])
        want_ranges = expected_ranges(src, positions, MiB)
        rec.facts.update(segment_bytes=size, source_digest=want, range_positions=len(positions))
        print(f"segment: {args.size_mb} MiB, {os.cpu_count()} CPUs, python {sys.version.split()[0]}",
              flush=True)

        def rm(*paths: Path) -> Callable[[], None]:
            def remove() -> None:
                for path in paths:
                    path.unlink(missing_ok=True)
            return remove

        plugins: list[Any] = []
        if not args.skip_local:
            synced = rsm_plugins.load("local", {"root": str(tmp / "remote-fsync"), "fsync": True})
            unsynced = rsm_plugins.load("local", {"root": str(tmp / "remote"), "fsync": False})
            plugins += [synced, unsynced]
            full = replace(md, custom_metadata=unsynced.copy_log_segment_data(md, data))  # download source
            up = another_segment(md)
            shutil.copyfile(src, tmp / "plain.log")

            def plugin_upload(rsm: Any) -> Result:
                return timed(size, lambda: rsm.copy_log_segment_data(up, data),
                             lambda: file_digest([rsm.path_of(up, SegmentFileType.SEGMENT)]),
                             lambda: rsm.delete_log_segment_data(up))

            rows = run_rounds({
                "local plugin, fsync": lambda: plugin_upload(synced),
                "shutil.copyfile + fsync": lambda: timed(
                    size, lambda: copy_fsync(src, tmp / "pf.log"), lambda: file_digest([tmp / "pf.log"]),
                    rm(tmp / "pf.log")),
                "local plugin, no fsync": lambda: plugin_upload(unsynced),
                "shutil.copyfile": lambda: timed(size, lambda: shutil.copyfile(src, tmp / "p.log"),
                                                 lambda: file_digest([tmp / "p.log"]), rm(tmp / "p.log")),
            }, args.rounds, label="local upload", expect=want)
            rec.section("local upload", rows)
            down = tmp / "down.log"
            rows_down = run_rounds({
                "local plugin (CRC-32C checked)": lambda: timed(
                    size, lambda: stream_to_file(unsynced.fetch_log_segment(full, 0), down),
                    lambda: file_digest([down]), rm(down)),
                "local plugin (unchecked)": lambda: timed(
                    size, lambda: stream_to_file(unsynced.fetch_log_segment(md, 0), down),
                    lambda: file_digest([down]), rm(down)),
                "shutil.copyfile": lambda: timed(size, lambda: shutil.copyfile(tmp / "plain.log", down),
                                                 lambda: file_digest([down]), rm(down)),
            }, args.rounds, label="local download", expect=want)
            rec.section("local download", rows_down)
            print("local plugin, median of per-round ratios:")
            rec.add(headline(rows, "local upload with fsync vs an equally durable copy",
                             "local plugin, fsync",
                             "shutil.copyfile + fsync", 1 / 1.2, "within 1.2x (>= 0.83x)"))
            rec.add(headline(rows, "local upload without fsync vs a copy left in the page cache",
                             "local plugin, no fsync", "shutil.copyfile", None))
            rec.add(headline(rows_down, "local download (CRC-32C checked) vs a plain copy",
                             "local plugin (CRC-32C checked)", "shutil.copyfile", None))
            range_cases["local plugin"] = lambda: range_reads(
                lambda p: unsynced.fetch_log_segment(md, p, p + MiB - 1).read(), positions, MiB)

        if args.skip_s3:
            run_ranges(rec, range_cases, args.rounds, want_ranges, latencies)
            for p in plugins:
                p.close()
            rec.save(not args.no_save)
            return 0

        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        with s3_server(args) as (endpoint, bucket):
            import boto3

            def boto3_client(checksums: Literal["when_supported", "when_required"]) -> Any:
                return boto3.client(
                    "s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                    region_name="us-east-1",
                    config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                                  request_checksum_calculation=checksums,
                                  response_checksum_validation=checksums))

            client = boto3_client("when_required")
            # botocore's own default (``when_supported``): every part's CRC-32 computed while
            # streaming and sent as a trailer, which the store verifies, as the plugin's CRC-32C is
            # (like for like: the client above sends no checksum at all)
            checked = boto3_client("when_supported")
            tc = TransferConfig()  # boto3 defaults: 8 MiB parts, 10 threads
            rsm = rsm_plugins.load("s3", {"bucket": bucket, "endpoint_url": endpoint, "region": "us-east-1",
                                          "path_style": True, "access_key_id": "bench",
                                          "secret_access_key": "bench", "prefix": "rsm/"})
            plugins.append(rsm)
            full = replace(md, custom_metadata=rsm.copy_log_segment_data(md, data))  # download source
            client.upload_file(str(src), bucket, "plain.log", Config=tc)
            up = another_segment(md)

            def landed(key: str) -> Callable[[], str]:
                def read() -> str:
                    h = hashlib.blake2b(digest_size=16)
                    body = client.get_object(Bucket=bucket, Key=key)["Body"]
                    while chunk := body.read(16 * MiB):
                        h.update(chunk)
                    return h.hexdigest()
                return read

            rows = run_rounds({
                "s3 plugin": lambda: timed(size, lambda: rsm.copy_log_segment_data(up, data),
                                           landed(rsm.key(up, SegmentFileType.SEGMENT)),  # type: ignore[attr-defined]
                                           lambda: rsm.delete_log_segment_data(up)),
                "boto3 upload_file": lambda: timed(
                    size, lambda: client.upload_file(str(src), bucket, "up.log", Config=tc), landed("up.log"),
                    lambda: client.delete_object(Bucket=bucket, Key="up.log")),
                "boto3 upload_file, checksums": lambda: timed(
                    size, lambda: checked.upload_file(str(src), bucket, "up-checked.log", Config=tc),
                    landed("up-checked.log"),
                    lambda: client.delete_object(Bucket=bucket, Key="up-checked.log")),
            }, args.rounds, label="s3 upload", expect=want)
            rec.section("s3 upload", rows)
            down = tmp / "down-s3.log"
            rows_down = run_rounds({
                "s3 plugin (CRC-32C checked)": lambda: timed(
                    size, lambda: stream_to_file(rsm.fetch_log_segment(full, 0), down),
                    lambda: file_digest([down]), rm(down)),
                "boto3 download_file": lambda: timed(
                    size, lambda: client.download_file(bucket, "plain.log", str(down), Config=tc),
                    lambda: file_digest([down]), rm(down)),
            }, args.rounds, label="s3 download", expect=want)
            rec.section("s3 download", rows_down)
            print("s3 plugin (SeaweedFS), median of per-round ratios:")
            rec.add(headline(rows, "s3 upload vs boto3 TransferManager (SeaweedFS)", "s3 plugin",
                             "boto3 upload_file", 1.0))
            rec.add(headline(rows,
                             "s3 upload vs boto3 TransferManager, both checked by the store (SeaweedFS)",
                             "s3 plugin", "boto3 upload_file, checksums", 1.0))
            rec.add(headline(rows_down, "s3 download, CRC-32C checked, vs boto3 TransferManager (SeaweedFS)",
                             "s3 plugin (CRC-32C checked)", "boto3 download_file", 1.0))
            range_cases["s3 plugin"] = lambda: range_reads(
                lambda p: rsm.fetch_log_segment(md, p, p + MiB - 1).read(), positions, MiB)
            range_cases["boto3 get_object"] = lambda: range_reads(
                lambda p: client.get_object(Bucket=bucket, Key="plain.log",
                                            Range=f"bytes={p}-{p + MiB - 1}")["Body"].read(), positions, MiB)
            run_ranges(rec, range_cases, args.rounds, want_ranges, latencies)
            for p in plugins:
                p.close()
    rec.save(not args.no_save)
    return 0


def run_ranges(rec: Recorder, cases: dict[str, Callable[[], Result]], rounds: int, want: str,
               latencies: dict[str, list[float]]) -> None:
    """The range-read section: interleaved, every read's bytes digested; latencies of the counted
    rounds pooled per case (the rounds' lists are kept out of the JSON: only their summary)."""
    if not cases:
        return
    rows = run_rounds(cases, rounds, label="range reads", expect=want)
    for r in rows:
        for name, v in r["cases"].items():
            lat = v.pop("latencies_ms")
            v.update({k: round(x, 3) if isinstance(x, float) else x for k, x in latency_summary(lat).items()
                      if k != "samples"})
            if not r["warmup"]:
                latencies.setdefault(name, []).extend(lat)
    rec.section("range reads (1 MiB)", rows)
    rec.facts["latency_ms"] = {f"1 MiB range read, {name}": latency_summary(lat)
                              for name, lat in latencies.items()}
    if "s3 plugin" in cases:
        print("range reads, median of per-round ratios:")
        rec.add(headline(rows, "1 MiB range reads vs raw get_object (SeaweedFS)", "s3 plugin",
                         "boto3 get_object", None))


if __name__ == "__main__":
    raise SystemExit(main())
