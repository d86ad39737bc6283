"""The layer map (rlm/__init__.py, README) is a contract checked by import-linter (pyproject.toml):
it holds for the code, it covers every module, and it fails when a lower layer imports a higher one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlm", "rsm_plugins", "rlmm", "fetcher")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}  # the tree under test, not the installed one
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(cwd / "pyproject.toml")],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "layers"]
    return [m.strip() for layer in contract["layers"] for m in layer.replace("|", ":").split(":")]


def test_contracts_hold() -> None:
    res = _lint_imports(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Layers import only downward KEPT" in res.stdout


def test_every_module_has_a_layer() -> None:
    layers = _layers()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            if module in PACKAGES:
                continue  # the package roots only hold re-exports of their own layer
            assert any(module == m or module.startswith(m + ".") for m in layers), (
                f"{module} is in no layer of pyproject.toml's contract: place it in the layer map"
            )


def test_contract_fails_when_a_lower_layer_imports_a_higher_one(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "rlm" / "log" / "records.py").open("a") as f:
        f.write("\nfrom rlm.daemon import service  # noqa: E402 - a format module reaching up\n")
    (tmp_path / "fetcher" / "bad_reader.py").write_text("import rlm.daemon.copier  # a sibling\n")
    (tmp_path / "fetcher" / "bad_tables.py").write_text("import rlm.tables.writer  # a table writer\n")
    (tmp_path / "fetcher" / "http" / "bad_face.py").write_text("import rlm.log.records  # a face decoding\n")
    with (tmp_path / "rsm_plugins" / "local.py").open("a") as f:
        f.write("\nfrom rlm.errors import RlmError  # noqa: E402 - not through rsm_plugins.api\n")
    res = _lint_imports(tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "rlm.log.records -> rlm.daemon.service" in out, out
    assert "fetcher.bad_reader -> rlm.daemon.copier" in out, out
    assert "rsm_plugins.local -> rlm.errors" in out, out
    assert "The read side never imports the table writer BROKEN" in out, out
    assert "fetcher.bad_tables -> rlm.tables.writer" in out, out
    assert "Read faces never import Kafka's formats (rlm.log) BROKEN" in out, out
    assert "fetcher.http.bad_face -> rlm.log.records" in out, out
