"""``rlm demo``'s "Next, try" lines run as printed from the user's shell (issue 39, item 5): with
the venv not activated (``make demo`` runs ``.venv/bin/rlm``), ``rlm`` alone is "command not
found", so the lines name the path that works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_RLM = Path(sys.executable).parent / "rlm"


def test_next_steps_run_as_printed_without_the_venv_on_path(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"  # a shell where the venv is not activated
    argv = [str(VENV_RLM), "demo", "--dir", str(tmp_path / "d"), "--size-mb", "1", "--no-spark"]
    demo = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    lines = demo.stdout.splitlines()
    steps = [ln.strip() for ln in lines[next(i for i, ln in enumerate(lines) if "Next, try:" in ln) + 1:]]
    assert len(steps) == 5, steps
    prefix = os.path.relpath(VENV_RLM, ROOT)  # .venv/bin/rlm, relative to the shell's directory
    prefix = prefix if not prefix.startswith("..") else str(VENV_RLM)
    assert all(s.startswith(f"{prefix} ") for s in steps), steps
    for step in steps:
        if " serve " in step:
            continue  # runs until stopped: its command line is checked by the others' prefix
        res = subprocess.run(["bash", "-c", step], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, (step, res.stdout[-1000:], res.stderr[-1000:])
        assert "command not found" not in res.stderr
