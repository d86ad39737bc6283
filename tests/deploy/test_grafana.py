"""deploy/grafana: the dashboard is valid JSON, its queries are valid PromQL (promtool), and every metric
it queries is one a live daemon exports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, LiveDaemon, exported_names
from tests.deploy.promql import expand_grafana_vars, metric_names

DASHBOARD = DEPLOY / "grafana" / "rlm-dashboard.json"


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries() -> list[str]:
    d = dashboard()
    out = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    for var in d["templating"]["list"]:
        q = var.get("query")
        if var["type"] == "query":
            text = q["query"] if isinstance(q, dict) else q
            inner = text[len("label_values(") : text.index(",")] if text.startswith("label_values(") else text
            out.append(inner)
    return out


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
    for topic in ("copy lag", "bytes copied", "remote log size", "gaps", "errors"):
        assert topic in titles


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
    used = set().union(*(metric_names(expand_grafana_vars(q)) for q in queries()))
    assert {"rlm_remote_copy_bytes_total", "rlm_remote_copy_lag_offsets", "rlm_errors_total"} <= used
    assert used <= exported, sorted(used - exported)
    # the copy throughput series has samples (not only a header) after the daemon copied
    assert 'rlm_remote_copy_bytes_total{partition="0",topic="scrape"}' in live_daemon.metrics_text


def test_compose_provisions_this_dashboard() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    src = next(m.split(":")[0] for m in mounts if m.split(":")[1] == "/var/lib/grafana/dashboards")
    assert (DEPLOY / "compose" / src).resolve() == DASHBOARD.parent.resolve()
