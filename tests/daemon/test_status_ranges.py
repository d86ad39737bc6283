"""``rlm status`` numbers that agree (issue 39, item 4): every range is ``[start, end)`` (Kafka's
convention) in the table and in ``--json``'s ``ranges``, and a restarted daemon shows what
storage and metadata hold during its first pass and after a stop in the middle of it (it used to
show ``LOCAL -1..-1``, ``SEGS 0`` for already tiered partitions)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from rlm.daemon.status import CARRIED_NOTE
from rlm.exit_codes import ExitCode
from tests.daemon.helpers import wait_for
from tests.daemon.test_standalone import ROOT, cfg_for, run_once, write_partition


def status_json(work: Path) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-m", "rlm.cli", "status", "--work-dir", str(work), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.stderr == "" or "Traceback" not in res.stderr, res.stderr
    return dict(json.loads(res.stdout))


def status_table(work: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "rlm.cli", "status", "--work-dir", str(work)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in res.stderr, res.stderr
    return res.stdout


def test_restarted_daemon_shows_what_is_tiered_during_and_after_an_interrupted_pass(tmp_path: Path) -> None:
    logs, work, remote = tmp_path / "logs", tmp_path / "work", tmp_path / "remote"
    write_partition(logs, "zz", 0, 60)  # tiered by the first run
    run_once(cfg_for(logs, work, storage={"plugin": "local", "config": {"root": str(remote)}}))
    before = status_json(work)["partitions"]["zz-0"]
    assert before["remote_end"] > 0 and before["remote_segments"] > 0

    write_partition(logs, "aa", 0, 60)  # new: its copy hangs in the second run
    cfg_file = tmp_path / "rlm.yaml"
    cfg_file.write_text(yaml.safe_dump({
        "log_dirs": [str(logs)], "work_dir": str(work), "shutdown_timeout_s": 1, "thread_pool_size": 1,
        "http": {"enabled": False}, "log_format": "json",
        "topic_defaults": {"remote.storage.enable": True, "retention.ms": -1},
        "storage": {"plugin": "tests.daemon.slow_rsm:HangingLocalRSM", "config": {"root": str(remote)}},
    }))
    proc = subprocess.Popen([sys.executable, "-m", "rlm.cli", "run", "--once", "--config", str(cfg_file)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("a copy under way", lambda: (remote / ".copy-started").exists(), timeout=60)
        wait_for("the status file of the running pass",
                 lambda: status_json(work)["state"] == "running", timeout=30)
        during = status_json(work)["partitions"]["zz-0"]
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, err[-2000:]

    after_doc = status_json(work)
    after = after_doc["partitions"]["zz-0"]
    for seen in (during, after):
        for key in ("remote_start", "remote_end", "remote_segments", "remote_bytes", "local_start",
                    "local_end"):
            assert seen[key] == before[key], (key, seen, before)
        assert seen["ranges"]["remote"] == [before["remote_start"], before["remote_end"] + 1]
        assert seen["ranges"]["local"] == [before["local_start"], before["local_end"]]
    assert after_doc["range_convention"] == "[start, end)"

    table = status_table(work)
    row = next(ln for ln in table.splitlines() if ln.startswith("zz-0"))
    assert f"[{before['remote_start']}, {before['remote_end'] + 1})" in row, table
    assert f"[{before['local_start']}, {before['local_end']})" in row, table
    assert "-1" not in row, table
    assert "[start, end)" in table.splitlines()[1], table
    if after["note"] == CARRIED_NOTE:  # the pass never reached it: the table says so
        assert "as of an earlier run" in table, table
