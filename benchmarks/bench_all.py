"""``make bench``: the headline comparisons at a small size, one table at the end (not a test).

Runs each benchmark script in turn (each interleaves its cases, checks every round's content
digests and writes ``docs/data/bench-<name>.json``), stops at the first one that fails (a failed
check is exit 2), regenerates docs/performance.md's blocks with ``scripts/gen_performance_doc.py``
and prints one table: ours vs the named alternative, the median per-round ratio, the goal, met or
not. Sizes are chosen to finish in well under 15 minutes on a 2-core machine; fixed costs weigh
more at these sizes than at each script's defaults.

    .venv/bin/python benchmarks/bench_all.py            # everything
    .venv/bin/python benchmarks/bench_all.py decode tier   # some
    .venv/bin/python benchmarks/bench_all.py http-load load rlmm   # the ones left out of make bench
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SMALL: dict[str, list[str]] = {
    "decode": ["bench_decode.py", "--size-mb", "16", "--baseline-mb", "8", "--rounds", "3"],
    "tier": ["bench_tier.py", "--size-gb", "0.25", "--layouts", "100", "--rounds", "3"],
    # 4 scans a round: a 64 MB scan takes ~0.1 s, too short for a round's ratio to mean anything
    "fetch-s3": ["bench_fetch.py", "--storage", "s3", "--size-mb", "64", "--segment-mb", "16",
                 "--samples", "50", "--cold-samples", "10", "--rounds", "5", "--repeat", "4"],
    "fetch-local": ["bench_fetch.py", "--storage", "local", "--size-mb", "64", "--segment-mb", "16",
                    "--samples", "50", "--cold-samples", "10", "--rounds", "5", "--repeat", "4"],
    "spark-s3": ["bench_spark.py", "--storage", "s3", "--records", "500000", "--rounds", "3"],
    "kafka-endpoint": ["bench_kafka_endpoint.py", "--size-mb", "32", "--rounds", "3"],
    "rsm": ["bench_rsm.py", "--size-mb", "64", "--ranged-reads", "20", "--rounds", "3"],  # ~26 s
    "compaction": ["bench_compaction.py", "--keys", "20000", "--rounds", "3"],  # its default size, ~30 s
}

# Run by name only (``bench_all.py http-load``): at these sizes they would take ``make bench`` past
# its 15 minutes (measured alone on the 2-core machine at load ~2.5: http-load 33 s, load 60 s,
# rlmm 141 s, against ~14 min for SMALL); the docs' blocks for them come from these commands.
OPTIONAL: dict[str, list[str]] = {
    "http-load": ["bench_http_load.py", "--mib", "8", "--queries", "512", "--clients", "1,16,64",
                  "--rounds", "3"],
    "load": ["bench_load.py", "--partitions", "200", "--segments", "20000", "--baseline", "20,2000",
             "--rounds", "3"],
    "rlmm": ["bench_rlmm.py", "--segments", "200000", "--lookups", "50000", "--check-lookups", "5000",
             "--rounds", "3"],
}


def main(argv: list[str]) -> int:
    known = {**SMALL, **OPTIONAL}
    names = argv or list(SMALL)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; known: {list(known)}")
    took = {}
    for name in names:
        script, *args = known[name]
        print(f"\n==== {name}: {script} {' '.join(args)}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.run([sys.executable, str(HERE / script), *args], cwd=ROOT).returncode
        took[name] = time.monotonic() - t0
        if rc != 0:
            print(f"\n{name} FAILED (exit {rc}): its figures are void", flush=True)
            return rc
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_performance_doc.py")], cwd=ROOT, check=True)
    print("\n" + ", ".join(f"{k} {v / 60:.1f} min" for k, v in took.items()))
    print()
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_performance_doc.py"), "--table"],
                          cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
