"""The contract kit against the ``local`` plugin (a temporary directory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import rsm_plugins
from rsm_plugins.api import RemoteStorageManager
from rsm_plugins.testing import RemoteStorageManagerContract


class TestLocalContract(RemoteStorageManagerContract):
    @pytest.fixture
    def rsm(self, tmp_path: Path) -> Iterator[RemoteStorageManager]:
        plugin = rsm_plugins.load("local", {"root": str(tmp_path / "remote"), "broker.id": 0})
        yield plugin
        plugin.close()
