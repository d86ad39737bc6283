"""Operator-facing behaviour without a broker (issue 10): log dir errors at start, ``rlm status`` after
kill -9 and on a stale file, gaps that survive a restart, ``--version``, the untiered-topics list.

Standalone daemons on log dirs written by ``rlm.log.writer`` with the embedded defaults (local
storage, file metadata store), run as real ``rlm`` processes where the symptom is about a process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.commands.status import render_table
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.daemon.status import read_status
from rlm.log.partition import PartitionDir
from tests.daemon.helpers import wait_for
from tests.daemon.test_standalone import cfg_for, write_partition

ROOT = Path(__file__).resolve().parents[2]


def rlm(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    return subprocess.run(
        [sys.executable, "-m", "rlm.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=timeout,
    )


def write_cfg(path: Path, **doc: Any) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_missing_log_dir_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    for extra in ({"node_id": 1}, {}):  # without node_id the log dir must still be what is blamed
        cfg = write_cfg(tmp_path / "rlm.yaml", log_dirs=[str(missing)], work_dir=str(tmp_path / "w"), **extra)
        res = rlm("run", "--once", "--config", str(cfg))
        assert res.returncode == 3, res.stderr
        last = res.stderr.strip().splitlines()[-1]
        assert last.startswith("rlm: error: ") and "log_dirs" in last and str(missing) in last, last
        assert "does not exist" in last and "node_id" not in last and str(cfg) in last


def test_unreadable_log_dir_is_a_configuration_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root reads anything: make it "not a directory" instead, the other half of the check
        bad = tmp_path / "file-not-dir"
        bad.write_text("x")
        want = "is not a directory"
    else:
        bad = tmp_path / "locked"
        bad.mkdir(mode=0)
        want = "is not readable"
    cfg = write_cfg(tmp_path / "rlm.yaml", log_dirs=[str(bad)], node_id=1, work_dir=str(tmp_path / "w"))
    res = rlm("check", "--config", str(cfg))
    assert res.returncode == 1 and want in res.stdout and "FAIL  log dirs" in res.stdout, res.stdout


def test_plugin_config_typo_names_file_key_and_suggestion(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(
        f"log_dirs: [{tmp_path / 'logs'}]\nnode_id: 1\nwork_dir: {tmp_path / 'w'}\n"
        "remote.log.storage.manager.class.name: s3\nrsm.config.bukket: tiered\n"
    )
    res = rlm("run", "--config", str(cfg))
    assert res.returncode == 3
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rlm: error: preflight failed ({cfg}): storage.config (rsm.config.*): "), last
    assert "unknown key 'bukket' (did you mean 'bucket'?)" in last and "bucket: required" in last, last


@pytest.mark.slow
def test_status_after_kill_9_says_dead(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_partition(logs, "k", 0, 40)
    cfg = write_cfg(
        tmp_path / "rlm.yaml",
        log_dirs=[str(logs)],
        work_dir=str(tmp_path / "work"),
        http={"port": 0},
        topic_defaults={"remote.storage.enable": True},
        health_check_interval_ms=500,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm.cli", "run", "--config", str(cfg)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        status_file = tmp_path / "work" / "status.json"
        wait_for(
            "daemon running",
            lambda: status_file.exists() and json.loads(status_file.read_text())["state"] == "running",
        )
        alive = rlm("status", "--work-dir", str(tmp_path / "work"))
        assert alive.returncode == 0 and "state running" in alive.stdout, alive.stdout
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert json.loads(status_file.read_text())["state"] == "running", "the file still claims running"
    res = rlm("status", "--work-dir", str(tmp_path / "work"))
    assert res.returncode == 1
    assert "state DEAD" in res.stdout and f"pid {proc.pid} is not running" in res.stdout, res.stdout
    js = json.loads(rlm("status", "--work-dir", str(tmp_path / "work"), "--json").stdout)
    assert js["liveness"]["state"] == "DEAD" and js["liveness"]["alive"] is False


def test_status_file_without_heartbeat_is_stale(tmp_path: Path) -> None:
    """The pid is alive (this test process) but the file has not been rewritten for minutes."""
    work = tmp_path / "work"
    work.mkdir()
    old = int(time.time() * 1000) - 10 * 60 * 1000
    (work / "status.json").write_text(json.dumps({
        "node_id": 1, "pid": os.getpid(), "state": "running", "updated_ms": old, "started_ms": old,
        "heartbeat_ms": 5000, "partitions": {},
    }))
    res = rlm("status", "--work-dir", str(work))
    assert res.returncode == 1, res.stdout
    assert "state STALE" in res.stdout and "no update for 10m" in res.stdout, res.stdout


def test_gaps_shown_and_kept_across_restarts(tmp_path: Path) -> None:
    full = tmp_path / "full"
    write_partition(full, "g", 0, 250)
    bases = [s.base_offset for s in PartitionDir(full / "g-0").segments]
    logs = tmp_path / "logs"
    shutil.copytree(full, logs)
    pdir = logs / "g-0"
    for f in pdir.iterdir():  # the broker had written 3 segments: 2 rolled + the active one
        stem = f.name.split(".")[0]
        if stem.isdigit() and int(stem) >= bases[3] and f.suffix != ".snapshot":
            f.unlink()
    cfg = cfg_for(logs, tmp_path / "work")
    d = Daemon(cfg, once=True).start()
    d.run_once()
    d.stop()
    st = read_status(tmp_path / "work").partitions["g-0"]
    assert st.copy_lag == 0, "nothing eligible is waiting: the active segment is not lag"
    shutil.rmtree(logs)
    shutil.copytree(full, logs)
    for f in pdir.iterdir():  # local retention deleted segments 2..4 before they were copied
        stem = f.name.split(".")[0]
        if stem.isdigit() and int(stem) < bases[5] and f.suffix != ".snapshot":
            f.unlink()
    want_gap = [[bases[2], bases[5] - 1]]
    for _run in range(2):  # the second run is a restart: the gap is derived again, not lost or doubled
        d = Daemon(cfg, once=True).start()
        assert d.run_once() == 0
        d.stop()
        status = read_status(tmp_path / "work")
        st = status.partitions["g-0"]
        assert st.gaps == want_gap and st.gap_offsets == bases[5] - bases[2]
        assert st.copy_lag == 0 and st.remote_end == bases[-1] - 1
        table = render_table(status)
        header, row = [ln for ln in table.splitlines() if ln.startswith(("PARTITION", "g-0"))]
        gap_col = header.index("GAP")
        assert row[gap_col:].split()[0] == str(bases[5] - bases[2]), table
        assert f"gaps g-0: [{bases[2]}, {bases[5]})" in table  # [start, end), as every range


def test_version() -> None:
    res = rlm("--version")
    assert res.returncode == 0 and res.stdout.startswith("rlm ") and res.stdout.split()[1][0].isdigit()


def test_untiered_topics_listed_with_the_reason(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_partition(logs, "tiered", 0, 30)
    write_partition(logs, "plain", 0, 30)
    write_partition(logs, "compacted", 0, 30)
    cfg = load_config(
        None, log_dirs=[str(logs)], work_dir=str(tmp_path / "work"), http={"enabled": False},
        topics=[
            {"pattern": "tiered", "remote.storage.enable": True},
            {"pattern": "compacted", "remote.storage.enable": True, "cleanup.policy": "compact"},
        ],
    )
    d = Daemon(cfg, once=True).start()
    d.run_once()
    d.stop()
    res = rlm("status", "--work-dir", str(tmp_path / "work"))
    assert res.returncode == 0, res.stdout + res.stderr
    listed = res.stdout.split("not tiered:\n", 1)[1]
    assert "plain: remote.storage.enable is not true" in listed
    assert "compacted" not in listed, "compacted topics are tiered (docs/compacted-topics.md)"
    assert "tiered:" not in listed.replace("not tiered:", "")


def test_segment_copied_logged_once_per_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import structlog

    from rlm.logging_setup import configure_logging

    logs = tmp_path / "logs"
    write_partition(logs, "once", 0, 60)
    saved = structlog.get_config()
    configure_logging("json", "debug")  # even at debug level: the plugin's own event has another name
    try:
        d = Daemon(cfg_for(logs, tmp_path / "work"), once=True).start()
        assert d.run_once() == 0
        d.stop()
        copied, _ = d.metrics.copied_totals()
    finally:
        structlog.configure(**saved)
    events = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    copied_events = [e for e in events if e["event"] == "segment_copied"]
    assert copied > 0 and len(copied_events) == copied
    assert len({e["segment_id"] for e in copied_events}) == copied
    assert sum(e["event"] == "rsm_segment_written" for e in events) == copied + 1  # + the preflight probe
