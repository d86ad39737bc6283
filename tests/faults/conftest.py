"""Fixtures shared by the fault modules: one three-node KRaft cluster for every cluster test.

Why package scope: a three-node cluster costs about a minute to start; the cluster-fault tests
(``test_cluster_faults.py``) and the leadership-history tests (``test_cluster_history.py``) each
create their own topics and metadata topics on it, and restart any node they stop.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services.kafka import KafkaCluster
from tests.services.proc import kill

FAULTS_DIR = Path(__file__).resolve().parent
ROOT = FAULTS_DIR.parents[1]
#: This run's fault results, rewritten after every fault test so that later tests of the same
#: session (tests/test_reliability_doc.py) see them; scripts/gen_reliability_doc.py records them.
RUN_RESULTS = Path(os.environ.get("RLM_FAULTS_RESULTS", str(ROOT / ".it" / "faults-results.json")))
PRODUCT_DIRS = ("rlm", "rsm_plugins", "rlmm", "fetcher")
#: the fault tests and their helpers (not this file: it only keeps the books)
TESTS = ("tests/faults", ":(exclude)tests/faults/conftest.py")
_run: dict[str, Any] = {}


def _git(*args: str) -> str:
    res = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    return res.stdout.strip() if res.returncode == 0 else ""


def _start_run() -> None:
    """A new results file, or the continuation of the last one when the product code and the fault
    tests are the same as when it was written (a rerun of some tests after a first run: each test
    keeps its latest outcome; ``runs`` lists every run's commit and date)."""
    head = _git("rev-parse", "HEAD") or "unknown"
    dirty = bool(_git("status", "--porcelain", "--", *PRODUCT_DIRS, *TESTS))
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    results: dict[str, Any] = {}
    runs: list[dict[str, str]] = []
    try:
        old = json.loads(RUN_RESULTS.read_text())
    except (OSError, ValueError):
        old = None
    if old and not dirty and not old.get("product_dirty") and old.get("commit") and subprocess.run(
            ["git", "-C", str(ROOT), "diff", "--quiet", old["commit"], head, "--", *PRODUCT_DIRS, *TESTS],
            capture_output=True).returncode == 0:
        results = old.get("results", {})
        runs = old.get("runs") or [{"commit": old["commit"], "date": old.get("date", "")}]
    _run.update(commit=head, product_dirty=dirty, date=now, runs=[*runs, {"commit": head, "date": now}],
                results=results)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record each fault test's outcome (any phase failing makes it failed/error, a skip skipped)."""
    if "::" not in report.nodeid:
        return
    key = report.nodeid.split("tests/faults/", 1)[-1]
    if not _run:
        _start_run()
    if report.when == "setup":  # a rerun replaces the test's earlier outcome, which stays listed
        before = _run["results"].get(key)
        earlier = [*before.get("earlier", []), before["outcome"]] if before else []
        _run["results"][key] = {"outcome": "passed", "time_s": 0.0}
        if earlier:
            _run["results"][key]["earlier"] = earlier
    row = _run["results"].setdefault(key, {"outcome": "passed", "time_s": 0.0})
    row["time_s"] = round(row["time_s"] + report.duration, 1)
    if report.failed:
        row["outcome"] = "failed" if report.when == "call" else "error"
    elif report.skipped and row["outcome"] == "passed":
        row["outcome"] = "skipped"
    if report.when == "teardown":
        RUN_RESULTS.parent.mkdir(parents=True, exist_ok=True)
        tmp = RUN_RESULTS.with_suffix(".tmp")
        body = {**_run, "results": dict(sorted(_run["results"].items()))}
        tmp.write_text(json.dumps(body, indent=1) + "\n")
        tmp.replace(RUN_RESULTS)


@pytest.fixture(scope="package")
def cluster3() -> Iterator[KafkaCluster]:
    c = KafkaCluster(nodes=3, name="kafka3-faults").start()
    try:
        yield c
    finally:
        # its data is thrown away: no controlled shutdown (the last node's waits for a quorum
        # that is gone, until the 30 s grace ends)
        for n in c.node_ids:
            proc = c.node(n).proc
            if proc is not None:
                kill(proc)
                c.node(n).proc = None
        c.stop()
