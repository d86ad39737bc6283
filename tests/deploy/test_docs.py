"""docs/deploy.md and the compose walkthrough name files, alerts and endpoints that exist."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, ROOT, LiveDaemon, exported_names

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
def test_metric_names_in_the_docs_are_exported(live_daemon: LiveDaemon) -> None:
    exported = exported_names(live_daemon.metrics_text)
    named = set(re.findall(r"`(rlm_[a-z_]+)", DOC.read_text())) - PENDING_RENAMES
    assert len(named) >= 15
    assert named <= exported, sorted(named - exported)
