"""deploy/prometheus: the alert rules pass promtool, fire on the series the daemon (group rlm-tiering) or
``rlm serve`` (group rlm-read) exports, and the PrometheusRule copy for Kubernetes is the same rules."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, LiveDaemon, LiveServe, exported_names
from tests.deploy.promql import metric_names

RULES = DEPLOY / "prometheus" / "rlm-alerts.yml"
# Series Prometheus makes itself, not the daemon.
PROMETHEUS_OWN = {"up"}


# The group of rules on the read side's series; the other groups are on the daemon's.
READ_GROUP = "rlm-read"


def rules(group: str | None = None) -> list[dict[str, str]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] if group in (None, g["name"])
            for r in g["rules"]]


def daemon_rules() -> list[dict[str, str]]:
    return [r for r in rules() if r not in rules(READ_GROUP)]


def test_promtool_check_rules(promtool: str) -> None:
    res = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(rules())} rules found" in res.stdout


def test_promtool_unit_tests_fire_each_alert(promtool: str) -> None:
    """rlm-alerts.test.yml feeds synthetic series with the daemon's names and expects each alert."""
    test_file = RULES.with_name("rlm-alerts.test.yml")
    res = subprocess.run(
        [promtool, "test", "rules", test_file.name], capture_output=True, text=True, cwd=test_file.parent
    )
    assert res.returncode == 0, res.stdout + res.stderr
    tested = {t["alertname"] for case in yaml.safe_load(test_file.read_text())["tests"]
              for t in case["alert_rule_test"]}
    assert tested == {r["alert"] for r in rules()}, "every alert has a unit test"


def test_required_alerts_present() -> None:
    names = {r["alert"] for r in rules()}
    assert {"RlmDaemonDown", "RlmRemoteCopyGap", "RlmCopyLagNearLocalRetention", "RlmTaskErrors",
            "RlmRemoteStorageUnreachable", "RlmReadApiErrors"} <= names
    assert {r["alert"] for r in rules(READ_GROUP)} == {"RlmReadApiErrors"}
    for r in rules():
        assert r["labels"]["severity"] in {"warning", "critical"}
        assert r["annotations"]["summary"] and r["annotations"]["description"]


def test_prometheusrule_matches_rules_file() -> None:
    doc = yaml.safe_load((DEPLOY / "kubernetes" / "broker-sidecar" / "prometheusrule.yaml").read_text())
    assert doc["kind"] == "PrometheusRule"
    assert doc["spec"] == yaml.safe_load(RULES.read_text())


@pytest.mark.slow
def test_rules_use_only_exported_metrics(live_daemon: LiveDaemon) -> None:
    exported = exported_names(live_daemon.metrics_text)
    used = set().union(*(metric_names(r["expr"]) for r in daemon_rules()))
    assert used, "the lexer found no metric names"
    assert used - PROMETHEUS_OWN <= exported, sorted(used - PROMETHEUS_OWN - exported)


@pytest.mark.slow
def test_read_rules_use_only_metrics_rlm_serve_exports(live_serve: LiveServe) -> None:
    exported = exported_names(live_serve.metrics_text)
    read_rules = rules(READ_GROUP)
    used = set().union(*(metric_names(r["expr"]) for r in read_rules))
    assert used == {"rlm_http_request_duration_seconds_count"}
    assert used <= exported, sorted(used - exported)
    # the labels the rule filters on are the ones rlm serve puts on its samples
    sample = next(line for line in live_serve.metrics_text.splitlines()
                  if line.startswith("rlm_http_request_duration_seconds_count{"))
    assert all(f'{label}="' in sample for label in ("route", "status", "method")), sample


def test_metric_name_lexer() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, task) (rate(rlm_task_duration_seconds_bucket'
            '{instance=~"a|b"}[5m]))) > 1e3 and on (instance) up{job="rlm"} == 0 or vector(0)')
    assert metric_names(expr) == {"rlm_task_duration_seconds_bucket", "up"}


def test_rules_file_path_used_by_compose() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    src = [m.split(":")[0] for m in mounts if "rlm-alerts.yml" in m]
    assert src and (DEPLOY / "compose" / Path(src[0])).resolve() == RULES.resolve()
