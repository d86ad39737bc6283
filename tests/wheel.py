"""The project built as a wheel, as users install it: for tests of what only an installed copy does.

The test venv's editable install puts the whole repo root on ``sys.path``; the wheel holds only
the packages and ``pyspark_kafka_tiered.py``, which is what the container image and the Spark
cluster tests must run. Built once per test session (about 2 s with uv's cache).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).with_name("uv")


class WheelBuildError(RuntimeError):
    """The project's wheel could not be built or installed."""


def build_wheel(out_dir: Path) -> Path:
    """Build the project's wheel into ``out_dir``; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([str(UV), "build", "-q", "--wheel", "--out-dir", str(out_dir), str(ROOT)],
                       capture_output=True, text=True, timeout=600)
    wheels = sorted(out_dir.glob("kafka_rlm_sidecar-*.whl"))
    if r.returncode != 0 or not wheels:
        raise WheelBuildError(f"uv build failed ({r.returncode}): {r.stderr[-2000:]}")
    return wheels[-1]


def install_target(wheel: Path, target: Path) -> Path:
    """Install ``wheel`` alone (no dependencies: the venv has them) into ``target``, a PYTHONPATH dir."""
    r = subprocess.run([str(UV), "pip", "install", "-q", "--no-deps", "--python", sys.executable,
                        "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise WheelBuildError(f"installing {wheel.name} failed: {r.stderr[-2000:]}")
    return target
