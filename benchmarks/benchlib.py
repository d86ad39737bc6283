"""What every benchmark shares: interleaved rounds, content digests, headline ratios, raw JSON.

Why one module: the figures in docs/performance.md are only as good as the way they are taken,
so the rules live in one place —

* the cases of a comparison run **interleaved** (A, B, A, B, ...), one unmeasured warm-up round
  first, so the load of a shared machine falls on both sides alike;
* every case of every round returns a **digest of the content** of all records it read (not a
  count); a round whose digests differ from the reference's fails the benchmark (non-zero exit);
* the headline figure is the **median of per-round ratios** (ours / the alternative, same round);
* the raw figures of every round go to ``docs/data/bench-<name>.json`` with the commit, the date,
  the machine and its load average, which ``scripts/gen_performance_doc.py`` turns into tables.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"


class BenchFailure(SystemExit):
    """A check failed: the benchmark's figures are void (exit status 2)."""

    def __init__(self, message: str) -> None:
        print(f"BENCHMARK FAILED: {message}", flush=True)
        super().__init__(2)


# ---- digests ----------------------------------------------------------------------------------
def _binary_parts(h: Any, column: Any) -> None:
    """Lengths (-1 for null) and the concatenated bytes of a binary/string column: independent of
    how the column is chunked, so two decoders' tables digest equal iff their values are equal."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_string(arr.type):
        arr = arr.cast(pa.binary())
    lengths = pc.fill_null(pc.binary_length(arr), -1).cast(pa.int64())
    h.update(lengths.to_numpy(zero_copy_only=False).tobytes())
    if len(arr):
        offsets = arr.buffers()[1]
        data = arr.buffers()[2]
        import numpy as np

        o = np.frombuffer(offsets, np.int32, count=len(arr) + 1, offset=arr.offset * 4)
        if data is not None and o[-1] > o[0]:
            h.update(memoryview(data)[int(o[0]):int(o[-1])])


def table_digest(tables: Mapping[int, Any], headers: bool = False) -> str:
    """Digest of the records of ``{partition: Arrow table with offset, key, value[, headers]}``
    in offset order: offsets, keys, values (nulls distinct from empty) and optionally headers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    h = hashlib.blake2b(digest_size=16)
    for p in sorted(tables):
        t = tables[p]
        h.update(b"partition %d rows %d;" % (p, t.num_rows))
        h.update(t.column("offset").combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False).tobytes())
        _binary_parts(h, t.column("key"))
        _binary_parts(h, t.column("value"))
        if headers:
            hc = t.column("headers").combine_chunks()
            h.update(pc.fill_null(pc.list_value_length(hc), -1).cast(pa.int64())
                     .to_numpy(zero_copy_only=False).tobytes())
            flat = pc.list_flatten(hc)
            _binary_parts(h, flat.field("key"))
            _binary_parts(h, flat.field("value"))
    return h.hexdigest()


def file_digest(paths: Iterable[Path | str]) -> str:
    """Digest of the bytes of ``paths`` in order (a copy, an upload read back, a download)."""
    h = hashlib.blake2b(digest_size=16)
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(16 << 20):
                h.update(chunk)
    return h.hexdigest()


def records_digest(records: Mapping[int, Iterable[tuple[int, bytes | None, bytes | None]]],
                   headers: Mapping[int, list[list[tuple[str, bytes | None]]]] | None = None) -> str:
    """The same digest as :func:`table_digest` from Python records ``(offset, key, value)`` (e.g. a
    Kafka client's messages), with their headers as ``[(key, value), ...]`` per record if given."""
    import pyarrow as pa

    tables = {}
    for p, recs in records.items():
        rows = list(recs)
        cols: dict[str, Any] = {
            "offset": pa.array([r[0] for r in rows], pa.int64()),
            "key": pa.array([r[1] for r in rows], pa.binary()),
            "value": pa.array([r[2] for r in rows], pa.binary()),
        }
        if headers is not None:
            struct = pa.struct([("key", pa.string()), ("value", pa.binary())])
            cols["headers"] = pa.array([[{"key": k, "value": v} for k, v in hs] for hs in headers[p]],
                                       pa.list_(struct))
        tables[p] = pa.table(cols)
    return table_digest(tables, headers=headers is not None)


# ---- rounds -----------------------------------------------------------------------------------
@dataclass
class Result:
    """One case of one round: how long it took, how much it read, and what (the digest)."""

    seconds: float
    digest: str
    bytes: int = 0
    records: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def run_rounds(cases: Mapping[str, Callable[[], Result]], rounds: int, *, warmup: int = 1,
               label: str = "", expect: str | None = None, reference: str | None = None,
               own: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Run ``cases`` interleaved, ``warmup`` + ``rounds`` times; every case's digest must equal
    ``expect`` (when known beforehand) or the ``reference`` case's (default: the first) of the
    same round, else :class:`BenchFailure`. Cases in ``own`` read other data (a synthetic ceiling):
    their digest must only stay the same from round to round. Returns one dict per round.

    Each round starts one case further on (A B C, B C A, C A B...), so that no case keeps one
    place: with a fixed order, a case run right after ``download_file`` measured faster than one
    run first (2026-11-29, pinned S3 scan: a read setting placed last measured 0.92-0.98x of the
    download in three runs against 0.82-0.87x for the default placed first; rotated, the two
    measured 0.92x and 0.93x)."""
    ref = reference or next(iter(cases))
    own = set(own)
    first: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    names = list(cases)
    for r in range(warmup + rounds):
        row: dict[str, Any] = {"round": r - warmup, "warmup": r < warmup, "load_avg": os.getloadavg()[0],
                               "cases": {}}
        shift = r % len(names)
        results = {name: cases[name]() for name in names[shift:] + names[:shift]}
        for name in names:  # recorded in the cases' own order, whatever order they ran in
            res = results[name]
            row["cases"][name] = {"seconds": res.seconds, "bytes": res.bytes, "records": res.records,
                                  "digest": res.digest, **res.extra}
        want = expect if expect is not None else row["cases"][ref]["digest"]
        bad = {k: v["digest"] for k, v in row["cases"].items()
               if v["digest"] != (first.setdefault(k, v["digest"]) if k in own else want)}
        if bad:
            raise BenchFailure(f"{label} round {row['round']}: content differs from {want}: {bad}")
        out.append(row)
        print(f"{label} round {'warm-up' if row['warmup'] else row['round']} (load {row['load_avg']:.1f}): "
              + "  ".join(f"{k} {v['seconds']:.3f}s" for k, v in row["cases"].items()), flush=True)
    return out


def median_ratio(rows: list[dict[str, Any]], ours: str, alternative: str) -> tuple[float, list[float]]:
    """Median over the counted rounds of ``alternative's seconds / ours`` (= our rate / theirs, the
    same work in both): > 1 means ours is faster."""
    ratios = [r["cases"][alternative]["seconds"] / r["cases"][ours]["seconds"]
              for r in rows if not r["warmup"]]
    return statistics.median(ratios), ratios


def headline(rows: list[dict[str, Any]], what: str, ours: str, alternative: str, goal: float | None,
             goal_text: str | None = None) -> dict[str, Any]:
    """One comparison for the docs and ``make bench``: the median per-round rate ratio and its goal
    (``None``: a figure for context, with no goal to meet)."""
    med, ratios = median_ratio(rows, ours, alternative)
    met = None if goal is None else med >= goal
    entry = {"what": what, "ours": ours, "alternative": alternative, "ratio": round(med, 3),
             "ratio_rounds": [round(x, 3) for x in ratios], "goal": goal,
             "goal_text": goal_text or ("none (context)" if goal is None else f">= {goal:g}x"), "met": met}
    verdict = "" if met is None else ("met" if met else "NOT met")
    print(f"  {what}: {ours} vs {alternative}: {med:.2f}x (rounds {', '.join(f'{x:.2f}' for x in ratios)}; "
          f"goal {entry['goal_text']}) {verdict}", flush=True)
    return entry


def target(what: str, value: float, unit: str, goal_text: str, met: bool | None) -> dict[str, Any]:
    """An absolute figure against its target (bytes per segment, seconds to restart), for the
    benchmarks whose goal is not a ratio to an alternative; listed with the headlines."""
    entry = {"what": what, "value": round(value, 3), "unit": unit, "goal_text": goal_text, "met": met}
    verdict = "" if met is None else ("met" if met else "NOT met")
    print(f"  {what}: {value:,.3g} {unit} (target {goal_text}) {verdict}", flush=True)
    return entry


def latency_summary(samples_ms: Iterable[float]) -> dict[str, Any]:
    """p50/p99 (nearest rank) of latencies in milliseconds, for ``facts["latency_ms"]``."""
    s = sorted(samples_ms)
    return {"p50": s[round(0.5 * (len(s) - 1))], "p99": s[round(0.99 * (len(s) - 1))], "samples": len(s)}


def quiet_logs() -> None:
    """Only warnings from the product's structlog loggers: the benchmark's own lines stay readable."""
    from rlm.logging_setup import configure_logging

    configure_logging("console", "warning")


# ---- raw results ------------------------------------------------------------------------------
def git_commit() -> str:
    res = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return res.stdout.strip() or "unknown"


def machine() -> dict[str, Any]:
    """What the figures depend on, including how busy the machine was when they were taken."""
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "mem_mib": mem, "load_avg": [round(x, 2) for x in os.getloadavg()]}


def sized_name(name: str, size: float, default: float, unit: str) -> str:
    """The results name of a run: ``name`` at the script's documented default size, else
    ``name-<size><unit>`` (e.g. ``make bench``'s small size), so that both sizes are recorded side
    by side in ``docs/performance.md`` instead of one overwriting the other (issue 42, item 5)."""
    return name if size == default else f"{name}-{size:g}{unit}"


class Recorder:
    """Collects a benchmark's rounds and headlines; :meth:`save` writes ``docs/data/bench-<name>.json``."""

    def __init__(self, name: str, args: Any) -> None:
        self.name = name
        self.args = vars(args) if not isinstance(args, dict) else args
        self.started = time.time()
        self.machine_start = machine()
        self.sections: dict[str, Any] = {}
        self.headlines: list[dict[str, Any]] = []
        self.targets: list[dict[str, Any]] = []
        self.facts: dict[str, Any] = {}

    def section(self, key: str, rows: list[dict[str, Any]]) -> None:
        self.sections[key] = rows

    def add(self, entry: dict[str, Any]) -> None:
        self.headlines.append(entry)

    def add_target(self, entry: dict[str, Any]) -> None:
        self.targets.append(entry)

    def save(self, enabled: bool = True) -> Path | None:
        if not enabled:
            return None
        out = DATA / f"bench-{self.name}.json"
        end = machine()
        loads = [r["load_avg"] for rows in self.sections.values() for r in rows if "load_avg" in r]
        out.write_text(json.dumps({
            "benchmark": self.name, "commit": git_commit(),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - self.started, 1),
            "machine": {**self.machine_start, "load_avg_end": end["load_avg"],
                        "load_avg_rounds": [min(loads), max(loads)] if loads else None},
            "args": self.args, "facts": self.facts, "headlines": self.headlines,
            **({"targets": self.targets} if self.targets else {}), "rounds": self.sections,
        }, indent=1, default=str) + "\n")
        print(f"raw results: {out.relative_to(ROOT)}", flush=True)
        return out
