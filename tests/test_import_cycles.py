"""No import circle among the project's modules (scripts/check_import_cycles.py, also run by
``make lint``): the tree has none, and a circle added to a copy of it is named."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_import_cycles.py"


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], cwd=root, capture_output=True,
                          text=True, timeout=300)


def test_the_tree_has_no_import_circle() -> None:
    res = _check(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 import circles" in res.stdout


def test_a_circle_is_found_even_through_a_function_level_import(tmp_path: Path) -> None:
    for package in ("rlm", "rsm_plugins", "rlmm", "fetcher"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / "rlm" / "tables" / "protobuf_schema.py").open("a") as f:
        f.write("\n\ndef _back() -> None:\n    from rlm.tables import protobuf_decode  # noqa: F401\n")
    res = _check(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "rlm.tables.protobuf_decode <-> rlm.tables.protobuf_schema" in res.stdout, res.stdout
