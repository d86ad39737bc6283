"""deploy/grafana: the dashboard is valid JSON, its queries are valid PromQL (promtool), and every metric
it queries is one a live process exports: the daemon (``rlm run``) for the tiering rows, ``rlm serve`` for
the read-side row and its instance variable."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, LiveDaemon, LiveServe, exported_names
from tests.deploy.promql import expand_grafana_vars, metric_names

DASHBOARD = DEPLOY / "grafana" / "rlm-dashboard.json"
READ_ROW = "Read side (rlm serve)"
# Template variables whose instances are `rlm serve` processes (the others list daemons).
READ_VARS = {"serve_instance"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries_by_side() -> dict[str, list[str]]:
    """The panels' and query variables' expressions: "serve" for the panels under the read-side row and
    the read-side variables, "daemon" for the rest."""
    d = dashboard()
    out: dict[str, list[str]] = {"daemon": [], "serve": []}
    side = "daemon"
    for p in d["panels"]:
        if p["type"] == "row":
            side = "serve" if p["title"] == READ_ROW else "daemon"
            assert not p.get("panels"), "rows are expanded: their panels follow them"
        out[side].extend(t["expr"] for t in p.get("targets", []))
    for var in d["templating"]["list"]:
        q = var.get("query")
        if var["type"] == "query":
            text = q["query"] if isinstance(q, dict) else q
            inner = text[len("label_values(") : text.index(",")] if text.startswith("label_values(") else text
            out["serve" if var["name"] in READ_VARS else "daemon"].append(inner)
    return out


def queries() -> list[str]:
    return [q for side in queries_by_side().values() for q in side]


def used_metrics(side: str) -> set[str]:
    return set().union(*(metric_names(expand_grafana_vars(q)) for q in queries_by_side()[side]))


def test_dashboard_shape() -> None:
    d = dashboard()
    assert d["uid"] and d["title"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["targets"], p["title"]
        assert p["datasource"]["uid"] == "${datasource}", "panels follow the datasource variable"
        assert {"h", "w", "x", "y"} <= set(p["gridPos"])
    titles = " ".join(p["title"].lower() for p in d["panels"])
    for topic in ("copy lag", "bytes copied", "remote log size", "gaps", "errors", "latency p50 / p99",
                  "by status", "remote get", "remote bytes read", "cache hit ratio", "reader pool in use",
                  "rejected / timeouts"):
        assert topic in titles, topic
    assert READ_ROW in {p["title"] for p in d["panels"] if p["type"] == "row"}
    variables = {v["name"] for v in d["templating"]["list"]}
    assert variables >= READ_VARS


def test_read_side_panels_select_read_side_instances() -> None:
    """`rlm serve` exports no rlm_up, so its panels filter on their own variable, not the daemons'."""
    serve = queries_by_side()["serve"]
    assert serve
    for q in serve:
        assert "$instance" not in q, q
        if not q.startswith("rlm_"):  # the variable's own metric
            assert 'instance=~"$serve_instance"' in q, q


def test_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    """Every query (Grafana variables replaced) as a recording rule: promtool parses each one."""
    rules = [
        {"record": f"dashboard:query_{i}", "expr": expand_grafana_vars(q)} for i, q in enumerate(queries())
    ]
    f = tmp_path / "dashboard-queries.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    res = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_dashboard_metrics_are_exported(live_daemon: LiveDaemon) -> None:
    exported = exported_names(live_daemon.metrics_text)
    used = used_metrics("daemon")
    assert {"rlm_remote_copy_bytes_total", "rlm_remote_copy_lag_offsets", "rlm_errors_total"} <= used
    assert used <= exported, sorted(used - exported)
    # the copy throughput series has samples (not only a header) after the daemon copied
    assert 'rlm_remote_copy_bytes_total{partition="0",topic="scrape"}' in live_daemon.metrics_text


@pytest.mark.slow
def test_read_side_metrics_are_exported_by_rlm_serve(live_serve: LiveServe) -> None:
    exported = exported_names(live_serve.metrics_text)
    used = used_metrics("serve")
    assert {"rlm_http_request_duration_seconds_bucket", "rlm_fetch_remote_get_bytes_total",
            "rlm_fetch_chunk_cache_hits_total", "rlm_fetch_index_cache_hits_total",
            "rlm_fetch_reader_pool_in_use", "rlm_fetch_reader_pool_capacity",
            "rlm_fetch_reader_pool_rejected_total", "rlm_fetch_reader_pool_timeouts_total"} <= used
    assert used <= exported, sorted(used - exported)
    # the record read left labelled samples with the labels the panels group and filter by
    records = ('rlm_http_request_duration_seconds_count{method="GET",'
               'route="/v1/topics/{topic}/partitions/{partition}/records",status="200"}')
    assert records in live_serve.metrics_text
    assert re.search(r"^rlm_fetch_remote_get_requests_total [1-9]", live_serve.metrics_text, re.M)


def test_compose_provisions_this_dashboard() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    src = next(m.split(":")[0] for m in mounts if m.split(":")[1] == "/var/lib/grafana/dashboards")
    assert (DEPLOY / "compose" / src).resolve() == DASHBOARD.parent.resolve()
