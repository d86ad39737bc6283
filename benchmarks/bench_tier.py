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

Reported: MB/s of ``.log`` bytes and CPU seconds per GB of this process (the moto server's CPU is
not included: it runs in its own process). Source files are read from the page cache after the
first pass; each measured pass starts with empty targets.

    .venv/bin/python benchmarks/bench_tier.py --size-gb 1
"""

from __future__ import annotations

import argparse
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

GB = 1 << 30
MB = 1 << 20


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


def measure(fn: Callable[[], None], cleanup: Callable[[], None], repeat: int = 2) -> tuple[float, float]:
    """Best of ``repeat``: (wall seconds, CPU seconds of this process incl. all threads).

    ``os.sync()`` before each pass, so dirty pages of the previous step are not written back
    on this one's time; ``cleanup`` empties the target after each pass.
    """
    best: tuple[float, float] | None = None
    for _ in range(repeat):
        os.sync()
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        got = (time.perf_counter() - t0, time.process_time() - c0)
        cleanup()
        best = got if best is None or got[0] < best[0] else best
    assert best is not None
    return best


def run_daemon(log_dir: Path, work: Path, storage: dict[str, Any]) -> None:
    from rlm.config import load_config
    from rlm.daemon.logging_setup import configure_logging
    from rlm.daemon.service import Daemon

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
    failed = d.run_once()
    d.stop()
    if failed:
        raise SystemExit(f"daemon reported {failed} failed task(s)")


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


def bench_layout(
    root: Path, size: int, seg: int, url: str | None, client: Any
) -> list[tuple[str, float, float]]:
    logs = root / "logs"
    written = write_dir(logs, size, seg)
    pdir = logs / "bench-0"
    files = segment_files(pdir)
    log_bytes = sum(p.stat().st_size for p in files if p.suffix == ".log")
    for p in files:  # warm the page cache once, as a broker's recently rolled segments are
        with open(p, "rb") as f:
            while f.read(16 * MB):
                pass
    results = []

    def plain(fsync: bool) -> Callable[[], None]:
        def run() -> None:
            dst = root / "plain"
            dst.mkdir()
            for p in files:
                shutil.copyfile(p, dst / p.name)
                if fsync:
                    fd = os.open(dst / p.name, os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)

        return run

    def rm(*paths: Path) -> Callable[[], None]:
        return lambda: [shutil.rmtree(p, ignore_errors=True) for p in paths] and None

    local = {"plugin": "local", "config": {"root": str(root / "remote-local")}}
    wall, cpu = measure(
        lambda: run_daemon(logs, root / "w-local", local), rm(root / "w-local", root / "remote-local")
    )
    results.append(("rlm-local", wall, cpu))
    wall, cpu = measure(plain(False), rm(root / "plain"))
    results.append(("plain-copy", wall, cpu))
    wall, cpu = measure(plain(True), rm(root / "plain"))
    results.append(("plain-copy+fsync", wall, cpu))
    if url is None:  # --skip-s3
        shutil.rmtree(logs)
        return [(name, log_bytes / MB / wall, cpu / (log_bytes / GB)) for name, wall, cpu in results]

    bucket = f"bench-{seg // MB}"
    client.create_bucket(Bucket=bucket)
    storage = {
        "plugin": "s3",
        "config": {
            "bucket": bucket,
            "endpoint_url": url,
            "region": "us-east-1",
            "path_style": True,
            "access_key_id": "bench",
            "secret_access_key": "bench",
        },
    }

    def clean_s3() -> None:
        empty_bucket(client, bucket)
        shutil.rmtree(root / "w-s3", ignore_errors=True)

    wall, cpu = measure(lambda: run_daemon(logs, root / "w-s3", storage), clean_s3)
    results.append(("rlm-s3", wall, cpu))

    def upload() -> None:
        for p in files:
            client.upload_file(str(p), bucket, f"plain/{p.name}")

    wall, cpu = measure(upload, clean_s3)
    results.append(("boto3-upload", wall, cpu))
    shutil.rmtree(logs)
    print(
        f"  layout {seg // MB} MB segments: {written / GB:.2f} GB written, "
        f"{log_bytes / GB:.2f} GB of rolled .log",
        flush=True,
    )
    return [(name, log_bytes / MB / wall, cpu / (log_bytes / GB)) for name, wall, cpu in results]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gb", type=float, default=5.0, help="rolled data per layout (default 5)")
    ap.add_argument("--dir", type=Path, help="scratch directory (default: a temp dir)")
    ap.add_argument("--layouts", default="1024,100", help="segment sizes in MB (default 1024,100)")
    ap.add_argument("--skip-s3", action="store_true", help="only rlm-local and the plain copies")
    args = ap.parse_args()
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
        rows = []
        for seg_mb in (int(x) for x in args.layouts.split(",")):
            for name, mbps, cpu_gb in bench_layout(root, size, seg_mb * MB, url, client):
                rows.append((seg_mb, name, mbps, cpu_gb))
        print("\n| segments | method | MB/s | CPU s/GB |\n|---|---|---|---|")
        for seg_mb, name, mbps, cpu_gb in rows:
            print(f"| {seg_mb} MB | {name} | {mbps:.0f} | {cpu_gb:.2f} |")
        by = {(s, n): m for s, n, m, _ in rows}
        for seg_mb in sorted({s for s, *_ in rows}):
            local = by[(seg_mb, "rlm-local")]
            s3 = (
                f", boto3-upload / rlm-s3 = {by[(seg_mb, 'boto3-upload')] / by[(seg_mb, 'rlm-s3')]:.2f}x"
                if (seg_mb, "rlm-s3") in by
                else ""
            )
            print(
                f"segments {seg_mb} MB: plain-copy / rlm-local = {by[(seg_mb, 'plain-copy')] / local:.2f}x, "
                f"plain-copy+fsync / rlm-local = {by[(seg_mb, 'plain-copy+fsync')] / local:.2f}x{s3}"
            )
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
