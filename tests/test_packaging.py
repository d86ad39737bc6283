"""The package list in pyproject.toml is explicit (plus one top-level module file): it must match the tree."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_of_the_tree_is_listed() -> None:
    st = _pyproject()["tool"]["setuptools"]  # type: ignore[index]
    listed = set(st["packages"])
    found = {str(p.parent.relative_to(ROOT)).replace("/", ".")
             for top in ("rlm", "rsm_plugins", "rlmm", "fetcher") for p in (ROOT / top).rglob("__init__.py")}
    assert listed == found
    # the Spark lookup module is a file at the root, and the root is the package dir: setuptools'
    # editable install is then a static .pth that pkgutil (PySpark's lookup) sees
    assert st["py-modules"] == ["pyspark_kafka_tiered"] and (ROOT / "pyspark_kafka_tiered.py").is_file()
    assert st["package-dir"] == {"": "."}


def test_spark_extra_asks_for_the_data_source_api() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]  # type: ignore[index]
    assert extras["spark"] == ["pyspark>=4.0"]
