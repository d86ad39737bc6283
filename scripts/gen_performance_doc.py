"""Generate docs/performance.md's figures from the benchmarks' raw results (docs/data/bench-*.json).

Each benchmark script (benchmarks/bench_*.py, through benchmarks/benchlib.py) writes every round of
a run with the commit, the date and the machine's load to ``docs/data/bench-<name>.json``. This
script renders, per file, the block between ``<!-- generated: bench-<name> -->`` and
``<!-- end generated: bench-<name> -->`` in docs/performance.md (hand-written prose stays around
the blocks), plus the summary of every headline comparison (``<!-- generated: headlines -->``).
A figure in the doc therefore always comes from a file a script wrote.

    .venv/bin/python scripts/gen_performance_doc.py            # rewrite the generated blocks
    .venv/bin/python scripts/gen_performance_doc.py --check    # exit 1 if the doc is out of date
    .venv/bin/python scripts/gen_performance_doc.py --table    # print the headline table (make bench)

Reads JSON only (no imports of the product), so ``--check`` takes well under a second.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
DATA_DIR = ROOT / "docs" / "data"
MB = 1 << 20
#: per-case fields shown as extra columns (median of the counted rounds) where a benchmark records them
EXTRA_COLUMNS = {
    "logins_per_s": "median logins/s",  # bench_endpoint_hostile (a)
    "endpoint_cpu_s": "median endpoint CPU s",  # bench_endpoint_hostile (b)
    "flood_cpu_s": "median flood CPU s",
    "flood_reopened_during_read": "median flood re-opened",
    "daemon_start_s": "median daemon start s",  # bench_tier: a run's fixed costs ...
    "daemon_copy_s": "median copy pass s",  # ... against its per-segment ones
    "daemon_stop_s": "median daemon stop s",
}
BLOCK = re.compile(r"<!-- generated: ([\w.-]+) -->\n.*?<!-- end generated: \1 -->", re.S)


def load(data_dir: Path) -> dict[str, dict[str, Any]]:
    """``{block name: results}`` for every ``bench-*.json``; older files without ``headlines``
    (bench_kafka_endpoint before benchlib) are converted from their per-target summary."""
    out = {}
    for path in sorted(data_dir.glob("bench-*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if "headlines" not in data:
            data = _legacy_endpoint(data)
        out[path.stem] = data
    return out


def _legacy_endpoint(data: dict[str, Any]) -> dict[str, Any]:
    heads = []
    sections: dict[str, list[dict[str, Any]]] = {}
    for row in data.get("rounds", []):
        key = f"{row['consumers']} consumer(s)"
        sections.setdefault(key, []).append(
            {"round": row["round"] - 1 if not row["warmup"] else -1, "warmup": row["warmup"],
             "cases": {k: {**v, "seconds": v["seconds"]} for k, v in row["targets"].items()}})
    for target, by in data.get("median_ratio_to_broker", {}).items():
        for consumers, med in by.items():
            counted = [r for r in sections.get(consumers, []) if not r["warmup"]]
            ratios = [r["cases"]["broker"]["seconds"] / r["cases"][target]["seconds"] for r in counted]
            heads.append({"what": f"Kafka endpoint, {consumers}, {data.get('security', 'plaintext')}",
                          "ours": target, "alternative": "broker", "ratio": round(med, 3),
                          "ratio_rounds": [round(x, 3) for x in ratios], "goal": 1.0,
                          "goal_text": ">= 1x", "met": med >= 1.0})
    return {**data, "headlines": heads, "rounds": sections, "facts": {"ends": data.get("ends")},
            "args": {"size_mb": data.get("size_mb"), "security": data.get("security")}}


def _value(t: dict[str, Any]) -> str:
    return f"{t['value']:,.3g} {t['unit']}"


def _met(h: dict[str, Any]) -> str:
    return "" if h.get("met") is None else ("met" if h["met"] else "**not met**")


def _load(data: dict[str, Any]) -> str:
    m = data.get("machine", {})
    rounds = m.get("load_avg_rounds")
    if rounds:
        return f"load average {rounds[0]:.1f}-{rounds[1]:.1f} during the rounds"
    if m.get("load_avg"):
        return f"load average {m['load_avg'][0]:.1f} at the start"
    return "load not recorded"


def provenance(data: dict[str, Any]) -> str:
    m = data.get("machine", {})
    args = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
                    for k, v in (data.get("args") or {}).items() if v not in (None, False) and k != "no_save")
    return (f"Run of `{data['benchmark']}` on commit `{data['commit'][:10]}`, {data['date']}, "
            f"{m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}, {_load(data)} "
            f"(the machine is shared with other jobs; the rounds are interleaved, so each round's "
            f"ratio compares the cases under the same load). Arguments: `{args or 'defaults'}`.")


def render_block(name: str, data: dict[str, Any]) -> str:
    lines = [provenance(data)]
    if data["headlines"]:
        lines += ["", "| comparison | ours | alternative | median ratio (ours / theirs, rate) | per round "
                  "| goal | |", "|---|---|---|---|---|---|---|"]
    for h in data["headlines"]:
        lines.append(f"| {h['what']} | {h['ours']} | {h['alternative']} | **{h['ratio']:.2f}x** | "
                     f"{', '.join(f'{x:.2f}' for x in h['ratio_rounds'])} | {h['goal_text']} | {_met(h)} |")
    if data.get("targets"):
        lines += ["", "| measure | result | target | |", "|---|---|---|---|"]
        for t in data["targets"]:
            lines.append(f"| {t['what']} | **{_value(t)}** | {t['goal_text']} | {_met(t)} |")
    for section, rows in (data.get("rounds") or {}).items():
        counted = [r for r in rows if not r["warmup"]]
        if not counted:
            continue
        # per-case figures a benchmark records beside its time, as extra columns when present
        extras = [(k, title) for k, title in EXTRA_COLUMNS.items()
                  if any(k in c for c in counted[0]["cases"].values())]
        lines += ["", f"{section}: {len(counted)} counted round(s) after {len(rows) - len(counted)} "
                  "warm-up; every case's content digest equal in every round.", "",
                  "| case | median s | median MB/s | records |" + "".join(f" {t} |" for _, t in extras),
                  "|---|---|---|---|" + "---|" * len(extras)]
        for case in counted[0]["cases"]:
            secs = statistics.median(r["cases"][case]["seconds"] for r in counted)
            nbytes = counted[0]["cases"][case].get("bytes") or 0
            rate = f"{nbytes / MB / secs:,.1f}" if nbytes else ""
            recs = counted[0]["cases"][case].get("records") or ""
            more = "".join(
                f" {statistics.median(r['cases'][case][k] for r in counted):,.2f} |"
                if k in counted[0]["cases"][case] else " |" for k, _ in extras)
            lines.append((f"| {case} | {secs:.3f} | {rate} | {recs:,} |" if recs else
                          f"| {case} | {secs:.3f} | {rate} | |") + more)
    lat_any = (data.get("facts") or {}).get("latency_ms")
    if lat_any:
        lines += ["", "| latency (every answer checked) | p50 | p99 | samples |", "|---|---|---|---|"]
        for kind, v in lat_any.items():
            lines.append(f"| {kind} | {v['p50']:.2f} ms | {v['p99']:.2f} ms | {v['samples']:,} |")
    lat = (data.get("facts") or {}).get("fetch_1mb_ms")
    if lat:
        lines += ["", "| `fetch` 1 MiB at random offsets (every answer checked) | p50 | p99 | samples |",
                  "|---|---|---|---|"]
        for kind, v in lat.items():
            lines.append(f"| {kind} index cache | {v['p50']:.1f} ms | {v['p99']:.1f} ms | {v['samples']} |")
    return "\n".join([f"<!-- generated: {name} -->", *lines, f"<!-- end generated: {name} -->"])


def render_headlines(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| benchmark | comparison | ours | alternative | median ratio | goal | | commit, date |",
             "|---|---|---|---|---|---|---|---|"]
    for name, data in results.items():
        for h in data["headlines"]:
            lines.append(f"| {name} | {h['what']} | {h['ours']} | {h['alternative']} | {h['ratio']:.2f}x | "
                         f"{h['goal_text']} | {_met(h)} | `{data['commit'][:10]}`, {data['date'][:10]} |")
        for t in data.get("targets", []):
            lines.append(f"| {name} | {t['what']} | measured | (absolute target) | {_value(t)} | "
                         f"{t['goal_text']} | {_met(t)} | `{data['commit'][:10]}`, {data['date'][:10]} |")
    return "\n".join(["<!-- generated: headlines -->", *lines, "<!-- end generated: headlines -->"])


def table(results: dict[str, dict[str, Any]]) -> str:
    """The plain-text headline table ``make bench`` prints."""
    rows = [("benchmark", "comparison", "ours vs alternative", "ratio", "goal", "")]
    for name, data in results.items():
        for h in data["headlines"]:
            rows.append((name, h["what"], f"{h['ours']} vs {h['alternative']}", f"{h['ratio']:.2f}x",
                         h["goal_text"], "" if h.get("met") is None else ("met" if h["met"] else "NOT MET")))
        for t in data.get("targets", []):
            rows.append((name, t["what"], "measured", _value(t), t["goal_text"],
                         "" if t.get("met") is None else ("met" if t["met"] else "NOT MET")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def splice(doc: str, results: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """The doc with every generated block re-rendered; problems (a block with no results file,
    results with no block) are returned, and results with no block are appended at the end."""
    blocks = {"headlines": render_headlines(results),
              **{name: render_block(name, data) for name, data in results.items()}}
    problems = []
    seen = set()

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        seen.add(name)
        if name not in blocks:
            problems.append(f"block {name!r} has no docs/data/{name}.json")
            return m.group(0)
        return blocks[name]

    new = BLOCK.sub(sub, doc)
    for name, text in blocks.items():
        if name not in seen:
            problems.append(f"no place for {name!r} in the doc: appended at the end")
            new = new.rstrip("\n") + f"\n\n{text}\n"
    return new, problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if the doc is out of date; write nothing")
    ap.add_argument("--table", action="store_true", help="print the headline table and exit")
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = ap.parse_args(argv)
    results = load(args.data_dir)
    if args.table:
        print(table(results))
        return 0  # a goal not met is a finding, not an error (a failed check already exited non-zero)
    doc = args.doc.read_text(encoding="utf-8")
    new, problems = splice(doc, results)
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    if args.check:
        if new != doc or problems:
            print(f"{args.doc} is out of date: run .venv/bin/python scripts/gen_performance_doc.py",
                  file=sys.stderr)
            return 1
        return 0
    if new != doc:
        args.doc.write_text(new, encoding="utf-8")
        print(f"wrote {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
