"""The ``s3`` plugin's chunk reads: the direct path (presigned GET, ``http.client``) vs boto3 (not a test).

Uploads one ``--size-mb`` segment to SeaweedFS (``weed mini``, started as the tests do), then in
interleaved rounds (one warm-up, then ``--rounds``) reads it in ``--chunk-mb`` ranges with
``read_log_segment_range``, the call the read core's chunk cache makes, through two plugin
instances on the same bucket: ``direct_range_gets: true`` (the default) and ``false`` (every GET
through boto3's stream, as before). Both are given the allocator settings ``rlm kafka-serve`` and
``rlm serve`` use (``fetcher/allocator.py``). Every round's bytes are digested and must equal the
segment's. Printed: per round the wall seconds of each case, then the median rate ratio and the
median CPU seconds of this process per case (SeaweedFS's own CPU is the same for both: the same
GETs of the same bytes).

    .venv/bin/python benchmarks/bench_s3_get.py --size-mb 256 --rounds 7
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Result, headline, quiet_logs, run_rounds


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--chunk-mb", type=int, default=8, help="range of one read (read.chunk_bytes)")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    quiet_logs()

    import rsm_plugins
    from fetcher.allocator import tune_allocator
    from rsm_plugins.testing import SegmentFactory, finished
    from tests.rsm.test_s3_contract import s3_config
    from tests.services.s3 import SeaweedFS

    tune_allocator(64 << 20, 512 << 20)
    weed = SeaweedFS(name="bench-s3-get").start()
    plugins: list[Any] = []
    try:
        bucket = weed.create_bucket("bench-get")
        seg = SegmentFactory(Path(tempfile.mkdtemp(prefix="bench-s3-get-"))).make(args.size_mb << 20)
        direct = rsm_plugins.load("s3", s3_config(weed, bucket, fetch_chunk_size=args.chunk_mb << 20))
        boto = rsm_plugins.load("s3", s3_config(weed, bucket, fetch_chunk_size=args.chunk_mb << 20,
                                                direct_range_gets=False))
        plugins = [direct, boto]
        md = finished(seg.metadata, direct.copy_log_segment_data(seg.metadata, seg.data))
        n, step = len(seg.log), args.chunk_mb << 20
        want = hashlib.sha256(seg.log).hexdigest()

        def case(plugin: Any) -> Result:
            digest = hashlib.sha256()
            c0, t0 = _cpu(), time.perf_counter()
            parts = [plugin.read_log_segment_range(md, s, min(s + step, n) - 1) for s in range(0, n, step)]
            seconds, cpu = time.perf_counter() - t0, _cpu() - c0
            for p in parts:
                digest.update(p)
            return Result(seconds=seconds, digest=digest.hexdigest(), bytes=n, extra={"cpu_s": cpu})

        rows = run_rounds({"direct GET": lambda: case(direct), "boto3 GET": lambda: case(boto)},
                          args.rounds, label="chunk reads", expect=want)
        headline(rows, f"{args.chunk_mb} MiB chunk reads of a {args.size_mb} MiB segment from SeaweedFS",
                 "direct GET", "boto3 GET", None)
        for name in ("direct GET", "boto3 GET"):
            cpu = statistics.median(r["cases"][name]["cpu_s"] for r in rows if not r["warmup"])
            print(f"  {name}: median CPU {cpu:.3f} s of this process per {args.size_mb} MiB", flush=True)
        assert direct._direct is not None and direct._direct.fallbacks == 0, "the direct path fell back"
    finally:
        for p in plugins:
            p.close()
        weed.stop()


if __name__ == "__main__":
    main()
