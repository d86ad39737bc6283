"""The suite's free-disk check: a nearly full disk stops the session with one line naming it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests import conftest


def test_enough_free_disk_is_no_problem(tmp_path: Path) -> None:
    real = shutil.disk_usage(tmp_path).free
    assert conftest.free_disk_problem(tmp_path, need=1) is None
    assert conftest.free_disk_problem(tmp_path, need=real + 1024**4) is not None


def test_a_nearly_full_disk_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def nearly_full(path: Any) -> Any:
        return shutil._ntuple_diskusage(100 * 1024**3, 98 * 1024**3, int(1.94 * 1024**3))

    monkeypatch.setattr(shutil, "disk_usage", nearly_full)
    problem = conftest.free_disk_problem(tmp_path)
    assert problem is not None
    assert "only 1.9 GiB free" in problem and str(tmp_path) in problem and "needs 3 GiB" in problem
