"""One exit-status table (issue 39, item 4): every subcommand's ``--help`` ends with the table of
:mod:`rlm.exit_codes`, any status a help text names is in it, docs/operations.md lists the same
statuses, and ``rlm fetch`` exits with the status its help gives for an offset out of range
(it said 2 and exited 1)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.cli import COMMANDS, build_parser
from rlm.exit_codes import EPILOG, MEANINGS, OFFSET_OUT_OF_RANGE, ExitCode

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"\bexit(?:s| status| code)?(?: with)? (\d+)\b")


def help_of(command: str) -> str:
    parser = build_parser([command])
    sub = next(a for a in parser._actions if a.dest == "command")
    return str(sub.choices[command].format_help())  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_help_ends_with_the_one_table(command: str) -> None:
    text = help_of(command)
    assert text.rstrip().endswith(EPILOG), text[-800:]
    named = {int(n) for n in NAMED.findall(text.replace(EPILOG, ""))}
    assert named <= {int(c) for c in MEANINGS}, (command, named)


def test_docs_list_the_same_statuses() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    listed = {int(m) for m in re.findall(r"^\| (\d+) \|", doc, flags=re.M)}
    assert listed == {int(c) for c in MEANINGS}


def test_fetch_out_of_range_exits_with_the_status_its_help_names(tmp_path: Path) -> None:
    said = re.search(r"outside the remote range is a runtime failure \(exit status (\d+)", help_of("fetch"))
    assert said is not None and int(said.group(1)) == OFFSET_OUT_OF_RANGE
    rlm = [sys.executable, "-m", "rlm.cli"]
    demo = subprocess.run([*rlm, "demo", "--dir", str(tmp_path / "d"), "--size-mb", "1", "--no-spark"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr[-2000:]
    res = subprocess.run([*rlm, "fetch", "--config", str(tmp_path / "d" / "rlm.yaml"),
                          "--topic", "orders", "--offset", "99999999", "--count", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == int(said.group(1)), res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("rlm: error:") and re.search(r"\[\d+, \d+\)", last), last


def test_status_names_its_unprotected_status_and_a_dead_daemon_comes_first() -> None:
    """``rlm status`` fails with its own status while a partition is not protected (it exited 0),
    says so in its help, and a dead or stale daemon still exits 1 (its partitions are old news)."""
    from rlm.commands.status import exit_status

    assert f"exit status {int(ExitCode.UNPROTECTED)}" in " ".join(help_of("status").split())
    unprotected = {"t-0": "NOT PROTECTED: its last run failed (retried with backoff): boom"}
    assert exit_status(None, unprotected) == ExitCode.UNPROTECTED
    assert exit_status("pid 1 is not running", unprotected) == ExitCode.FAILURE
    assert exit_status(None, {}) == ExitCode.OK
