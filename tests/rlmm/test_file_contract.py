"""The RemoteLogMetadataManager contract suite run against the embedded file store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlmm.api import RemoteLogMetadataManager
from rlmm.file import FileRemoteLogMetadataManager
from rlmm.testing import RemoteLogMetadataManagerContract


@pytest.fixture
def rlmm_factory(tmp_path: Path) -> Iterator[Callable[[], RemoteLogMetadataManager]]:
    opened: list[FileRemoteLogMetadataManager] = []

    def factory() -> RemoteLogMetadataManager:
        m = FileRemoteLogMetadataManager.open(tmp_path / "rlmm", **{"broker.id": 0})
        opened.append(m)
        return m

    yield factory
    for m in opened:
        m.close()


class TestFileStoreContract(RemoteLogMetadataManagerContract):
    pass


class TestFileStoreContractSmallSnapshots(RemoteLogMetadataManagerContract):
    """Same suite with a snapshot every 3 records, so restarts mix snapshot load and log replay."""

    @pytest.fixture
    def rlmm_factory(self, tmp_path: Path) -> Iterator[Callable[[], RemoteLogMetadataManager]]:
        opened: list[FileRemoteLogMetadataManager] = []

        def factory() -> RemoteLogMetadataManager:
            m = FileRemoteLogMetadataManager.open(tmp_path / "rlmm", **{"snapshot.interval.records": 3})
            opened.append(m)
            return m

        yield factory
        for m in opened:
            m.close()
