"""Install a package from ``examples/`` into the test venv, as a user would install a plugin."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def install_example(name: str, distribution: str) -> None:
    """``uv pip install examples/<name>`` into this interpreter's environment (reinstalling it)."""
    uv = Path(sys.executable).parent / "uv"
    cmd = [str(uv), "pip", "install", "--python", sys.executable, "--reinstall-package", distribution,
           str(REPO / "examples" / name)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stderr
    importlib.invalidate_caches()
