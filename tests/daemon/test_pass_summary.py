"""Per-pass summaries (issue 39, item 5): every pass logs ``pass_summary`` (segments and bytes
copied and deleted, copy lag); ``rlm run --once`` prints it for a human when stdout is a terminal
(a pty here), and only then."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import yaml

from rlm.log.partition import PartitionDir
from tests.daemon.test_standalone import ROOT, write_partition


def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({
        "log_dirs": [str(tmp_path / "logs")], "work_dir": str(tmp_path / "work"), "log_format": "json",
        "http": {"enabled": False}, "topic_defaults": {"remote.storage.enable": True, "retention.ms": -1},
        "storage": {"plugin": "local", "config": {"root": str(tmp_path / "remote")}},
    }))
    return cfg


def run_on_a_pty(cfg: Path) -> tuple[int, str, str]:
    """``rlm run --once`` with a pty as stdout; (status, what the terminal showed, stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "rlm.cli", "run", "--once", "--config", str(cfg)],
                            cwd=ROOT, stdout=slave, stderr=subprocess.PIPE, text=True)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, shown.decode(), err


def summaries(stderr: str) -> list[dict[str, object]]:
    out = []
    for ln in stderr.splitlines():
        if ln.startswith("{") and '"pass_summary"' in ln:
            out.append(json.loads(ln))
    return out


def test_once_logs_and_prints_the_pass(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_partition(logs, "sa", 0, 120)
    write_partition(logs, "sb", 0, 80)
    rolled = {t: PartitionDir(logs / f"{t}-0").segments[:-1] for t in ("sa", "sb")}
    want_segments = sum(len(s) for s in rolled.values())
    want_bytes = sum(s.size() for segs in rolled.values() for s in segs)
    assert want_segments >= 2

    code, shown, err = run_on_a_pty(config(tmp_path))
    assert code == 0, err[-2000:]
    (logged,) = summaries(err)
    assert logged["partitions"] == 2 and logged["failed"] == 0 and logged["complete"] is True, logged
    assert logged["segments_copied"] == want_segments and logged["bytes_copied"] == want_bytes, logged
    assert logged["segments_deleted"] == 0 and logged["lag_offsets"] == 0, logged
    line = re.search(r"pass: 2 partition\(s\) in [\d.]+s: copied (\d+) segment\(s\), .*; "
                     r"deleted 0 segment\(s\), 0 B; copy lag 0 offset\(s\) in 0 segment\(s\)", shown)
    assert line is not None and int(line.group(1)) == want_segments, shown

    # again, stdout not a terminal: nothing copied, logged, not printed
    argv = [sys.executable, "-m", "rlm.cli", "run", "--once", "--config", str(config(tmp_path))]
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "pass:" not in again.stdout, again.stdout
    (second,) = summaries(again.stderr)
    assert second["segments_copied"] == 0 and second["partitions"] == 2, second
