"""Tiering benchmark: ``rlm run --once`` vs a plain copy and vs boto3 ``upload_file`` (not a test).

Writes a partition directory of ``--size-gb`` (default 5) of rolled segments with
``rlm.log.writer.PartitionWriter`` (one encoded batch re-appended, so generation is I/O bound), once
with 1 GB segments and once with 100 MB segments, then in the same run measures, per layout:

* ``rlm-local``: the daemon (standalone, ``--once``) tiering every segment to the ``local`` plugin
  with the embedded file metadata store;
* ``plain-copy``: ``shutil.copyfile`` of the same files (``.log``, ``.index``, ``.timeindex``,
  ``.snapshot``) to another directory on the same disk, and ``plain-copy+fsync`` (each file fsynced,
  the durability the ``local`` plugin gives by default) — the floors for ``rlm-local``;
* ``rlm-s3``: the daemon tiering to a moto S3 server (a separate process) with the ``s3`` plugin;
* ``boto3-upload``: ``boto3``'s ``upload_file`` (managed multipart transfer, as ``aws s3 cp``) of
  the same files to the same server — the floor for ``rlm-s3``.

The methods run in interleaved rounds (one warm-up, then ``--rounds``), each after ``os.sync()``
and into an empty target. After each (untimed), the copy is read back — the remote segments the
daemon's metadata lists, fetched through the plugin; the plain copies' files; the uploaded
objects — and the digest of their ``.log`` bytes in order must equal the source's: every rolled
segment tiered, byte for byte, or the benchmark fails (exit 2).

Reported: the median of per-round rate ratios; raw MB/s of ``.log`` bytes and CPU seconds of this
process per case and round in ``docs/data/bench-tier.json`` (the moto server's CPU is not
included: it runs in its own process), and for the daemon's cases where the wall time went
(``daemon_start_s``: config, preflight and its storage probe; ``daemon_copy_s``: the pass copying
every segment; ``daemon_stop_s``), so that a run's fixed costs are told apart from its per-segment ones.

    .venv/bin/python benchmarks/bench_tier.py --size-gb 1
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Recorder, Result, headline, quiet_logs, run_rounds, sized_name

GB = 1 << 30
MB = 1 << 20
#: the documented default size (``bench-tier.json``; any other size: ``bench-tier-<n>gb.json``)
DEFAULT_SIZE_GB = 5.0


def write_dir(log_dir: Path, total: int, segment_bytes: int) -> int:
    """A partition dir with ``total`` bytes of rolled segments plus a small active one."""
    from rlm.log.checkpoints import MetaProperties
    from rlm.log.encode import encode_batch
    from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
    from rlm.types import KafkaUuid, TopicPartition

    now = int(time.time() * 1000)
    recs = [(f"key-{i:06d}".encode(), os.urandom(50).hex().encode() * 2, (), now + i) for i in range(500)]
    batch = encode_batch(recs, base_offset=0, producer_id=7, producer_epoch=0, base_sequence=0)
    w = PartitionWriter(
        log_dir / "bench-0", topic_id=KafkaUuid.random(), config=WriterConfig(segment_bytes=segment_bytes)
    )
    written = 0
    while written < total:
        w.append_encoded(batch, now=now)
        written += len(batch)
    w.roll(now)
    w.append_encoded(batch, now=now)
    w.close()
    write_log_dir_files(
        log_dir,
        [(TopicPartition("bench", 0), w.log_end_offset)],
        meta=MetaProperties(1, "bench-cluster-000000001", 1),
    )
    return written


def segment_files(pdir: Path) -> list[Path]:
    logs = sorted(p for p in pdir.glob("*.log"))[:-1]  # not the active segment
    out = []
    for log in logs:
        base = int(log.stem)
        out += [log, log.with_suffix(".index"), log.with_suffix(".timeindex")]
        nxt = logs[logs.index(log) + 1] if log != logs[-1] else sorted(pdir.glob("*.log"))[-1]
        snap = pdir / f"{int(nxt.stem):020d}.snapshot"
        if snap.exists():
            out.append(snap)
        del base
    return [p for p in out if p.exists()]


def run_daemon(log_dir: Path, work: Path, storage: dict[str, Any]) -> dict[str, float]:
    """``rlm run --once`` in this process; returns where its wall time went: ``daemon_start_s`` (config,
    preflight with its storage probes, metadata store, threads), ``daemon_copy_s`` (the pass over the
    partition: every segment through the copy protocol) and ``daemon_stop_s`` — the fixed costs of a run
    against the per-segment ones (docs/performance.md, Tiering)."""
    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from rlm.logging_setup import configure_logging

    t0 = time.perf_counter()
    configure_logging("console", "warning")
    cfg = load_config(
        None,
        log_dirs=[str(log_dir)],
        work_dir=str(work),
        storage=storage,
        http={"enabled": False},
        topic_defaults={"remote.storage.enable": True, "retention.ms": -1},
    )
    d = Daemon(cfg, once=True).start()
    t1 = time.perf_counter()
    failed = d.run_once()
    t2 = time.perf_counter()
    d.stop()
    if failed:
        raise SystemExit(f"daemon reported {failed} failed task(s)")
    return {"daemon_start_s": t1 - t0, "daemon_copy_s": t2 - t1, "daemon_stop_s": time.perf_counter() - t2}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    exe = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto_server did not start")


def s3_client(url: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


def empty_bucket(client: Any, bucket: str) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=o["Key"])


def digest_files(paths: list[Path]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(16 * MB):
                h.update(chunk)
    return h.hexdigest()


def remote_digest(work: Path, storage: dict[str, Any]) -> str:
    """The ``.log`` bytes of every remote segment of ``bench-0``, in offset order, as the plugin
    returns them (the daemon's metadata says which segments exist)."""
    from fetcher import RemoteFetcher
    from rlm.config import load_config

    h = hashlib.blake2b(digest_size=16)
    with RemoteFetcher.from_config(load_config(None, work_dir=str(work), storage=storage,
                                               http={"enabled": False})) as f:
        for seg in f.plan("bench", 0).segments:
            with f.rsm.fetch_log_segment(seg.metadata, 0) as stream:
                while chunk := stream.read(16 * MB):
                    h.update(chunk)
    return h.hexdigest()


def bench_layout(root: Path, size: int, seg: int, url: str | None, client: Any, rounds: int
                 ) -> tuple[list[dict[str, Any]], int]:
    """Interleaved rounds of every method on one layout; each case's copy is digested (untimed)
    and must hold every rolled segment's ``.log`` bytes, in order."""
    logs = root / "logs"
    write_dir(logs, size, seg)
    pdir = logs / "bench-0"
    files = segment_files(pdir)
    log_files = [p for p in files if p.suffix == ".log"]
    log_bytes = sum(p.stat().st_size for p in log_files)
    want = digest_files(log_files)
    for p in files:  # warm the page cache once, as a broker's recently rolled segments are
        with open(p, "rb") as f:
            while f.read(16 * MB):
                pass

    def timed(fn: Callable[[], dict[str, float] | None], check: Callable[[], str],
              cleanup: Callable[[], None]) -> Result:
        os.sync()  # dirty pages of the previous case are not written back on this one's time
        c0, t0 = time.process_time(), time.perf_counter()
        phases = fn() or {}
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        dig = check()
        cleanup()
        return Result(wall, dig, log_bytes, 0, {"cpu_s": cpu, "mb_per_s": log_bytes / MB / wall, **phases})

    def plain(fsync: bool) -> Result:
        dst = root / "plain"

        def run() -> None:
            dst.mkdir()
            for p in files:
                shutil.copyfile(p, dst / p.name)
                if fsync:
                    fd = os.open(dst / p.name, os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)

        return timed(run, lambda: digest_files([dst / p.name for p in log_files]),
                     lambda: shutil.rmtree(dst, ignore_errors=True))

    def rm(*paths: Path) -> Callable[[], None]:
        def remove() -> None:
            for p in paths:
                shutil.rmtree(p, ignore_errors=True)

        return remove

    local = {"plugin": "local", "config": {"root": str(root / "remote-local")}}
    # each of ours runs right after the copy it is compared with, so both start after the same kind
    # of clean-up (a local tree of the same size removed; the bucket emptied): rlm-local used to run
    # first in a round, right after the previous round's S3 clean-up
    cases: dict[str, Callable[[], Result]] = {
        "plain-copy": lambda: plain(False),
        "plain-copy+fsync": lambda: plain(True),
        "rlm-local": lambda: timed(lambda: run_daemon(logs, root / "w-local", local),
                                   lambda: remote_digest(root / "w-local", local),
                                   rm(root / "w-local", root / "remote-local")),
    }
    if url is not None:
        bucket = f"bench-{seg // MB}"
        client.create_bucket(Bucket=bucket)
        storage = {"plugin": "s3", "config": {"bucket": bucket, "endpoint_url": url, "region": "us-east-1",
                                              "path_style": True, "access_key_id": "bench",
                                              "secret_access_key": "bench"}}

        def clean_s3() -> None:
            empty_bucket(client, bucket)
            shutil.rmtree(root / "w-s3", ignore_errors=True)

        def upload() -> None:
            for p in files:
                client.upload_file(str(p), bucket, f"plain/{p.name}")

        def uploaded() -> str:
            h = hashlib.blake2b(digest_size=16)
            for p in log_files:
                h.update(client.get_object(Bucket=bucket, Key=f"plain/{p.name}")["Body"].read())
            return h.hexdigest()

        cases["boto3-upload"] = lambda: timed(upload, uploaded, clean_s3)
        cases["rlm-s3"] = lambda: timed(lambda: run_daemon(logs, root / "w-s3", storage),
                                        lambda: remote_digest(root / "w-s3", storage), clean_s3)
    rows = run_rounds(cases, rounds, label=f"{seg // MB} MB segments", expect=want)
    shutil.rmtree(logs)
    print(f"  layout {seg // MB} MB segments: {log_bytes / GB:.2f} GB of rolled .log in {len(log_files)} "
          f"segments, every copy digest-checked", flush=True)
    return rows, log_bytes


def main() -> int:
    quiet_logs()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gb", type=float, default=DEFAULT_SIZE_GB,
                    help="rolled data per layout (default 5)")
    ap.add_argument("--dir", type=Path, help="scratch directory (default: a temp dir)")
    ap.add_argument("--layouts", default="1024,100", help="segment sizes in MB (default 1024,100)")
    ap.add_argument("--skip-s3", action="store_true", help="only rlm-local and the plain copies")
    ap.add_argument("--rounds", type=int, default=3, help="counted interleaved rounds (after one warm-up)")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-tier.json")
    args = ap.parse_args()
    rec = Recorder(sized_name("tier", args.size_gb, DEFAULT_SIZE_GB, "gb"), args)
    import rlm.daemon.service  # noqa: F401 - imports are not part of what is measured
    import rlmm.file  # noqa: F401
    import rsm_plugins.local
    import rsm_plugins.s3  # noqa: F401

    root = Path(tempfile.mkdtemp(prefix="bench-tier-", dir=args.dir))
    moto, url = (None, None) if args.skip_s3 else start_moto()
    try:
        client = None if url is None else s3_client(url)
        size = int(args.size_gb * GB)
        print(
            f"bench_tier: {args.size_gb} GB per layout, scratch {root}, python {sys.version.split()[0]}, "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )
        for seg_mb in (int(x) for x in args.layouts.split(",")):
            rows, log_bytes = bench_layout(root, size, seg_mb * MB, url, client, args.rounds)
            rec.section(f"{seg_mb} MB segments", rows)
            rec.facts[f"log_bytes_{seg_mb}"] = log_bytes
            print(f"segments {seg_mb} MB, median of per-round ratios:")
            rec.add(headline(rows, f"tier to local, {seg_mb} MB segments, vs an equally durable copy",
                             "rlm-local", "plain-copy+fsync", 1 / 1.2, "within 1.2x (>= 0.83x)"))
            rec.add(headline(rows, f"tier to local, {seg_mb} MB segments, vs a copy left in the page cache",
                             "rlm-local", "plain-copy", None))
            if url is not None:
                rec.add(headline(rows, f"tier to S3 (moto), {seg_mb} MB segments, vs boto3 upload_file",
                                 "rlm-s3", "boto3-upload", 1.0))
        rec.save(not args.no_save)
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
