"""The HTTP API under concurrent load (a reduced ``benchmarks/bench_http_load.py``): 16 clients on
keep-alive connections for a few seconds against ``rlm serve`` as a subprocess. Every answer must
be a 200 whose body is byte for byte what the read core returns for the same query straight from
storage; the server's memory stays bounded and it is healthy and stops cleanly afterwards.

``read.fetch_max_wait_ms`` is raised so that a read queued behind others on a busy machine is not
a 504: this test proves correctness under concurrency, the benchmark reports latency."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.fetcher_http.conftest import Tiered

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

CLIENTS, SECONDS = 16, 3.0
RSS_BOUND_MIB = 1024  # generous: the server holds ~150-200 MiB; a leak per request would pass it


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_http_load", ROOT / "benchmarks" / "bench_http_load.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_http_load", module)
    spec.loader.exec_module(module)
    return module


def test_concurrent_clients_get_complete_correct_answers(tiered: Tiered, tmp_path: Path) -> None:
    bench = _bench()
    cfg = bench.serve_config(tmp_path, tiered.work, tmp_path / "serve", fetch_max_wait_ms=60_000)
    queries, answers, _ = bench.expected_answers(cfg, 48, topic=tiered.tips[0].topic, timing_s=0)
    assert {q.partition for q in queries} == {tp.partition for tp in tiered.tips}
    server = bench.Server(cfg, tmp_path / "serve.log")
    try:
        server.wait_healthy()
        res = bench.load(server, queries, answers, CLIENTS, SECONDS)
        assert res["stuck_clients"] == 0
        assert res["errors"] == 0 and res["wrong"] == 0, (
            res["errors_by_kind"],
            (tmp_path / "serve.log").read_text(),
        )
        assert res["requests"] >= CLIENTS and res["ok"] == res["requests"]
        assert res["rss_peak_mib"] < RSS_BOUND_MIB
        status, body = server.get("/health")
        assert status == 200 and json.loads(body)["status"] == "ok"
        status, _ = server.get(queries[0].path)  # still serving after the load
        assert status == 200
    finally:
        code = server.stop()
    assert code == 0, (tmp_path / "serve.log").read_text()
