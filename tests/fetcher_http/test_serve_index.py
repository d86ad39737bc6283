"""``rlm serve`` prints every address it listens on, and ``/`` is an HTML index of the API's entry
points (issue 39, item 5). Port 0: the test learns the port only from the printed address."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from tests.fetcher_http.conftest import Tiered
from tests.fetcher_http.test_serve_cli import ROOT, stop

pytestmark = pytest.mark.slow


def test_serve_prints_its_address_and_the_index_links_work(tiered: Tiered, tmp_path: Path) -> None:
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({
        "work_dir": str(tmp_path / "work"),
        "storage": {"plugin": "local", "config": {"root": str(tiered.work / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(tiered.work / "metadata")}},
    }))
    proc = subprocess.Popen([sys.executable, "-m", "rlm.cli", "serve", "--config", str(cfg), "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server listens (or the process ends)
        m = re.fullmatch(r"http API listening on (http://127\.0\.0\.1:(\d+)/) \(index: /\)\n", line)
        assert m is not None and int(m.group(2)) > 0, line
        base = m.group(1)
        index = requests.get(base, timeout=10)
        assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
        links = re.findall(r'href="([^"]+)"', index.text)
        assert {"/openapi.json", "/metrics", "/health"} <= set(links), index.text
        for link in links:
            assert requests.get(base.rstrip("/") + link, timeout=10).status_code == 200, link
    finally:
        assert stop(proc) == 0  # type: ignore[arg-type]
