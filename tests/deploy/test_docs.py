"""docs/deploy.md and the compose walkthrough name files, alerts and endpoints that exist."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, ROOT, LiveDaemon, LiveServe, exported_names

DOC = ROOT / "docs" / "deploy.md"


def test_every_deploy_path_named_in_the_docs_exists() -> None:
    for doc in (DOC, DEPLOY / "compose" / "README.md", DEPLOY / "kubernetes" / "strimzi" / "README.md"):
        text = doc.read_text()
        for path in set(re.findall(r"`(deploy/[\w./-]+)`", text)):
            assert (ROOT / path).exists(), f"{doc.name}: {path}"
        for link in re.findall(r"\]\((?!https?:)([^)#]+)\)", text):
            assert (doc.parent / link).exists(), f"{doc.name}: link {link}"


def test_alert_table_matches_the_rules() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rlm-alerts.yml").read_text())
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    documented = set(re.findall(r"^\| `(Rlm\w+)` \|", DOC.read_text(), re.M))
    assert documented == names


def test_docs_linked_from_readme_and_operations() -> None:
    assert "docs/deploy.md" in (ROOT / "README.md").read_text()
    assert "(deploy.md)" in (ROOT / "docs" / "operations.md").read_text()


# Named in the docs as the new name of `remote_copy_gap_segments_total` (issue 10 renames it).
PENDING_RENAMES = {"rlm_remote_copy_gap_segments_total"}


@pytest.mark.slow
def test_metric_names_in_the_docs_are_exported(live_daemon: LiveDaemon, live_serve: LiveServe) -> None:
    """Each `rlm_...` name in the docs is exported by the daemon or, for the read side's, by `rlm serve`."""
    daemon = exported_names(live_daemon.metrics_text)
    serve = exported_names(live_serve.metrics_text)
    named = set(re.findall(r"`(rlm_[a-z_]+)", DOC.read_text())) - PENDING_RENAMES
    assert len(named) >= 15
    assert named <= daemon | serve, sorted(named - daemon - serve)
    read_side = {n for n in named if n.startswith(("rlm_fetch_", "rlm_http_"))}
    assert len(read_side) >= 5 and read_side <= serve, sorted(read_side - serve)
