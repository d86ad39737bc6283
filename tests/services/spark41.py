"""A separate pyspark 4.1 with Iceberg's Spark runtime, for reading tables back with Spark SQL.

The newest ``iceberg-spark-runtime`` on Maven Central is built for Spark 4.0/4.1; the pyspark this
project installs (4.3) refuses its ``SparkCatalog``. So the tests that read an ``rlm iceberg``
table through Iceberg's own Spark catalog (SQLite and REST catalogs) run ``pyspark==4.1.x`` from
a venv of its own, kept in the repo's cache directory (``.cache/pyspark-<version>``, created with
``uv`` on first use, then reused; keyed by version, so a new pin builds a new venv), with the
runtime, the SQLite JDBC driver and iceberg-aws-bundle from
``deploy/local/spark41-iceberg/pom.xml``. Nothing else uses this venv; it never touches the
project's own environment.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.services.proc import CACHE_DIR, ServiceError, ensure_jars

PYSPARK_VERSION = "4.1.4"
JARS = "spark41-iceberg"


@dataclass(frozen=True)
class Spark41:
    """The separate install: its ``python`` (with pyspark 4.1) and the jars for ``spark.jars``."""

    python: Path
    jars: tuple[Path, ...]


def _uv() -> str:
    """``uv`` from the test venv (``make install`` puts it there), else the one on PATH."""
    here = Path(sys.executable).parent / "uv"
    if here.exists():
        return str(here)
    found = shutil.which("uv")
    if not found:
        raise ServiceError("uv not found: it creates the separate pyspark 4.1 venv (make install)")
    return found


def _venv(version: str) -> Path:
    """The venv with ``pyspark==version``, built once under a lock (parallel test processes wait)."""
    home = CACHE_DIR / f"pyspark-{version}"
    python = home / "bin" / "python"
    done = home / ".installed"
    if done.exists():
        return python
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / f"pyspark-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return python
        shutil.rmtree(home, ignore_errors=True)  # a half-built venv of an interrupted run
        uv = _uv()
        try:
            subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(home)], check=True,
                           capture_output=True, text=True, timeout=300)
            subprocess.run([uv, "pip", "install", "-q", "--python", str(python), f"pyspark=={version}"],
                           check=True, capture_output=True, text=True, timeout=900)
        except subprocess.CalledProcessError as e:
            raise ServiceError(f"pyspark {version} venv in {home}: {e.cmd} failed: {e.stderr}") from e
        done.write_text(version + "\n")
    return python


def spark41() -> Spark41:
    """The pyspark 4.1 venv and the Iceberg runtime jars (each created on first use, then cached)."""
    lib = ensure_jars(JARS)
    jars = tuple(sorted(lib.glob("*.jar")))
    if not jars:
        raise ServiceError(f"no jars in {lib}")
    return Spark41(_venv(PYSPARK_VERSION), jars)
