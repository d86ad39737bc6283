"""Reads do not list the catalog: the partition lookup every read does is a dictionary lookup in a
catalog kept for about a second, not a listing and sort of every partition with remote data."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from fetcher import RemoteFetcher
from rlm.errors import UnknownTopicOrPartitionError
from rlm.plugin_setup import load_rlmm, load_rsm
from rlmm.api import RemoteLogMetadataManager
from tests.fetcher._tiered import tier

READS = 200


class CountingRLMM:
    """The real metadata manager, counting how often the catalog is listed."""

    def __init__(self, inner: RemoteLogMetadataManager) -> None:
        self.inner = inner
        self.listings = 0

    def known_partitions(self) -> Any:
        self.listings += 1
        return self.inner.known_partitions()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_reads_do_not_list_the_catalog(tmp_path: Path) -> None:
    tiered = tier(tmp_path)
    rsm = load_rsm(tiered.config, -1)
    rlmm = CountingRLMM(load_rlmm(tiered.config, -1, read_only=True))
    try:
        with RemoteFetcher(rsm, cast(RemoteLogMetadataManager, rlmm), work_dir=tmp_path / "reader") as f, \
                RemoteFetcher.from_config(tiered.config) as fresh:
            start = f.plan("mixed", 0).log_start
            first = f.fetch("mixed", 0, start, max_bytes=1000)
            assert first.records == fresh.fetch("mixed", 0, start, max_bytes=1000).records
            rlmm.listings = 0
            for _ in range(READS):
                assert f.fetch("mixed", 0, start, max_bytes=1000).records == first.records
            assert rlmm.listings < READS // 10  # about one listing a second, not one a read
            with pytest.raises(UnknownTopicOrPartitionError):
                f.fetch("nope", 0, 0)
            with pytest.raises(UnknownTopicOrPartitionError):
                f.fetch("mixed", 7, 0)
            assert list(f.topics()) == ["mixed"]
    finally:
        rlmm.inner.close()
        rsm.close()
