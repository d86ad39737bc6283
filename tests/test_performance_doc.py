"""docs/performance.md's generated blocks agree with docs/data/bench-*.json, the generator renders
and places them, and the benchmarks' content digests (benchmarks/benchlib.py) tell equal records
from different ones whatever their chunking — the check every benchmark round relies on."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen_performance_doc.py"


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def test_performance_doc_is_up_to_date() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, (
        "docs/performance.md is out of date: run .venv/bin/python scripts/gen_performance_doc.py\n"
        + res.stderr)


def _results(met: bool) -> dict[str, object]:
    row = {"round": 0, "warmup": False, "load_avg": 3.5,
           "cases": {"ours": {"seconds": 1.0, "bytes": 1 << 20, "records": 10, "digest": "d"},
                     "theirs": {"seconds": 2.0 if met else 0.5, "bytes": 1 << 20, "records": 10,
                                "digest": "d"}}}
    ratio = 2.0 if met else 0.5
    return {"benchmark": "bench_x", "commit": "0123456789abcdef", "date": "2026-11-26T20:00:00+00:00",
            "machine": {"cpus": 2, "python": "3.11.7", "load_avg": [3.0, 2.0, 1.0],
                        "load_avg_rounds": [3.5, 3.5]},
            "args": {"size_mb": 8, "no_save": True}, "facts": {},
            "headlines": [{"what": "x vs y", "ours": "ours", "alternative": "theirs", "ratio": ratio,
                           "ratio_rounds": [ratio], "goal": 1.0, "goal_text": ">= 1x", "met": met}],
            "rounds": {"main": [{**row, "round": -1, "warmup": True}, row]}}


def test_generator_renders_places_and_checks(tmp_path: Path) -> None:
    gen = _module("gen_performance_doc", SCRIPT)
    data = tmp_path / "data"
    data.mkdir()
    (data / "bench-x.json").write_text(json.dumps(_results(met=False)))
    doc = tmp_path / "perf.md"
    doc.write_text("# P\n\nprose before\n\n<!-- generated: headlines -->\nold\n"
                   "<!-- end generated: headlines -->\n\n<!-- generated: bench-x -->\nstale figures\n"
                   "<!-- end generated: bench-x -->\n\nprose after\n")
    args = ["--doc", str(doc), "--data-dir", str(data)]
    assert gen.main([*args, "--check"]) == 1
    assert gen.main(args) == 0
    text = doc.read_text()
    assert "stale figures" not in text and "prose before" in text and "prose after" in text
    assert "| x vs y | ours | theirs | **0.50x** | 0.50 | >= 1x | **not met** |" in text
    assert "`0123456789`" in text and "load average 3.5-3.5" in text
    assert "| ours | 1.000 | 1.0 | 10 |" in text
    assert gen.main([*args, "--check"]) == 0
    # new results: the doc is out of date until regenerated
    (data / "bench-x.json").write_text(json.dumps(_results(met=True)))
    assert gen.main([*args, "--check"]) == 1
    gen.main(args)
    assert "| **2.00x** | 2.00 | >= 1x | met |" in doc.read_text()
    # results with no block: --check fails (the generator appends the block)
    (data / "bench-y.json").write_text(json.dumps(_results(met=True)))
    assert gen.main([*args, "--check"]) == 1
    # a block whose results file is gone
    (data / "bench-y.json").unlink()
    (data / "bench-x.json").unlink()
    assert gen.main([*args, "--check"]) == 1


def test_absolute_targets_and_latencies_render(tmp_path: Path) -> None:
    """A benchmark with absolute targets (bench_rlmm, bench_load) and latency summaries (bench_rsm,
    bench_http_load): both in its block, the targets also in the headline table and make bench's."""
    gen = _module("gen_performance_doc", SCRIPT)
    data = tmp_path / "data"
    data.mkdir()
    res = _results(met=True)
    res["targets"] = [{"what": "restart from the snapshot", "value": 12.5, "unit": "s", "goal_text": "< 10",
                       "met": False},
                      {"what": "lookup p99", "value": 34.0, "unit": "us", "goal_text": "none (context)",
                       "met": None}]
    res["facts"] = {"latency_ms": {"1 MiB range read, s3 plugin": {"p50": 7.94, "p99": 11.0, "samples": 150}}}
    (data / "bench-x.json").write_text(json.dumps(res))
    doc = tmp_path / "perf.md"
    doc.write_text("<!-- generated: headlines -->\n<!-- end generated: headlines -->\n\n"
                   "<!-- generated: bench-x -->\n<!-- end generated: bench-x -->\n")
    args = ["--doc", str(doc), "--data-dir", str(data)]
    assert gen.main(args) == 0
    text = doc.read_text()
    assert "| restart from the snapshot | **12.5 s** | < 10 | **not met** |" in text
    assert "| lookup p99 | **34 us** | none (context) |  |" in text
    assert ("| bench-x | restart from the snapshot | measured | (absolute target) | 12.5 s | < 10 "
            "| **not met** |") in text
    assert "| 1 MiB range read, s3 plugin | 7.94 ms | 11.00 ms | 150 |" in text
    assert gen.main([*args, "--check"]) == 0
    table = gen.table(gen.load(data))
    assert "restart from the snapshot" in table and "NOT MET" in table


@pytest.fixture(scope="module")
def benchlib() -> ModuleType:
    return _module("benchlib", ROOT / "benchmarks" / "benchlib.py")


def test_digest_is_of_content_not_chunking(benchlib: ModuleType) -> None:
    t = pa.table({"offset": pa.array([0, 1, 2], pa.int64()), "key": pa.array([b"a", None, b""]),
                  "value": pa.array([b"x", b"yy", None])})
    rechunked = pa.concat_tables([t.slice(0, 1), t.slice(1, 2)])
    assert benchlib.table_digest({0: t}) == benchlib.table_digest({0: rechunked}) == benchlib.records_digest(
        {0: [(0, b"a", b"x"), (1, None, b"yy"), (2, b"", None)]})
    assert benchlib.table_digest({0: t.slice(1)}) == benchlib.table_digest({0: rechunked.slice(1)})
    # null is not empty; one changed byte; the same records under another partition
    assert benchlib.records_digest({0: [(0, b"a", b"x"), (1, b"", b"yy"), (2, b"", None)]}) != \
        benchlib.table_digest({0: t})
    assert benchlib.records_digest({0: [(0, b"a", b"x"), (1, None, b"yz"), (2, b"", None)]}) != \
        benchlib.table_digest({0: t})
    assert benchlib.table_digest({1: t}) != benchlib.table_digest({0: t})


def test_headers_are_in_the_digest(benchlib: ModuleType) -> None:
    recs = {0: [(0, b"k", b"v"), (1, b"k", b"v")]}
    one = benchlib.records_digest(recs, {0: [[("h", b"1")], []]})
    assert one == benchlib.records_digest(recs, {0: [[("h", b"1")], []]})
    assert one != benchlib.records_digest(recs, {0: [[], [("h", b"1")]]})
    assert one != benchlib.records_digest(recs, {0: [[("h", b"2")], []]})


def test_a_round_with_different_content_fails(benchlib: ModuleType,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    same = benchlib.Result(0.1, "abc")
    rows = benchlib.run_rounds({"a": lambda: same, "b": lambda: same}, 2, label="t")
    assert [r["round"] for r in rows] == [-1, 0, 1] and rows[0]["warmup"]
    assert benchlib.median_ratio(rows, "a", "b")[0] == pytest.approx(1.0)
    with pytest.raises(SystemExit) as e:
        benchlib.run_rounds({"a": lambda: same, "b": lambda: benchlib.Result(0.1, "abd")}, 1, label="t")
    assert e.value.code == 2 and "content differs" in capsys.readouterr().out
    flip = iter(["c1", "c2"])
    with pytest.raises(SystemExit):  # a case checked only against itself must not change between rounds
        benchlib.run_rounds({"a": lambda: same, "c": lambda: benchlib.Result(0.1, next(flip))}, 1,
                            label="t", own=["c"])


def test_provenance_prints_flags_as_given() -> None:
    """A run's arguments are printed as its command line: a flag without a value is bare, an unset
    one (None, False) is left out, so a variant target says what it changed."""
    gen = _module("gen_performance_doc", SCRIPT)
    data = _results(met=True)
    data["args"] = {"size_mb": 256, "pin": True, "no_save": False, "py_spy": None,
                    "variant": "cached:RLM_READ__CHUNK_CACHE_BYTES=1073741824"}
    text = gen.provenance(data)
    assert "Arguments: `--size-mb 256 --pin --variant cached:RLM_READ__CHUNK_CACHE_BYTES=1073741824`." in text
