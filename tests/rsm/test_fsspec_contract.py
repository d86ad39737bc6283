"""The contract kit against the ``fsspec`` plugin: ``file://`` and the real mini HDFS over WebHDFS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rsm_plugins
from rsm_plugins.api import RemoteStorageManager
from rsm_plugins.testing import RemoteStorageManagerContract


class TestFsspecFileContract(RemoteStorageManagerContract):
    @pytest.fixture
    def rsm(self, tmp_path: Path) -> Iterator[RemoteStorageManager]:
        plugin = rsm_plugins.load("fsspec", {"url": f"file://{tmp_path / 'remote'}"})
        yield plugin
        plugin.close()


@pytest.mark.hdfs
@pytest.mark.slow
class TestFsspecWebHdfsContract(RemoteStorageManagerContract):
    large_segment_bytes = 9 << 20  # above the 8 MiB read-ahead block: reads span several ranged OPENs

    @pytest.fixture
    def rsm(self, hdfs: Any, hdfs_path: str) -> Iterator[RemoteStorageManager]:
        plugin = rsm_plugins.load(
            "fsspec",
            {
                "url": f"{hdfs.url_prefix}{hdfs_path}/tiered",
                "storage_options": {"user": hdfs.user},
            },
        )
        yield plugin
        plugin.close()
