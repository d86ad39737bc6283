"""The ``aiven`` plugin over the real objects of Aiven's plugin v1.1.1 (plain, zstd, zstd + AES-GCM):
every segment and index it returns is byte for byte the file the broker handed to the plugin
(the fixture recorded their SHA-256 before the broker deleted them)."""

from __future__ import annotations

import hashlib
import pickle

import pytest

import rsm_plugins
from rlm.types import IndexType, RemoteLogSegmentMetadata
from rsm_plugins.aiven import AivenRemoteStorageManager
from tests.aiven.helpers import AIVEN_CLASS, VARIANTS, finished_segments, local_files, plugin_block, topics_in


def _segments(variant: str) -> list[RemoteLogSegmentMetadata]:
    topics = topics_in(variant)
    return [md for md in finished_segments(variant) if md.topic_id_partition.topic in topics]


def _local(variant: str, md: RemoteLogSegmentMetadata, suffix: str) -> dict[str, object]:
    tp = md.topic_id_partition
    first = md.end_offset + 1 if suffix == ".snapshot" else md.start_offset  # snapshot: next offset
    name = f"{first:020d}{suffix}"
    return local_files(variant)[f"{tp.topic}/{tp.partition}"][name]


@pytest.fixture(params=VARIANTS)
def variant(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_broker_lines_load_the_aiven_plugin(variant: str) -> None:
    rsm = rsm_plugins.load(AIVEN_CLASS, plugin_block(variant))
    assert isinstance(rsm, AivenRemoteStorageManager)
    assert rsm.config.backend == "local"


def test_whole_segments_and_indexes_are_the_brokers_files(variant: str) -> None:
    rsm = rsm_plugins.load(AIVEN_CLASS, plugin_block(variant))
    segments = _segments(variant)
    assert segments
    for md in segments:
        with rsm.fetch_log_segment(md, 0) as f:
            data = f.read()
        want = _local(variant, md, ".log")
        assert len(data) == want["size"] == md.segment_size_in_bytes
        assert hashlib.sha256(data).hexdigest() == want["sha256"]
        for index_type, suffix in ((IndexType.OFFSET, ".index"), (IndexType.TIMESTAMP, ".timeindex"),
                                   (IndexType.PRODUCER_SNAPSHOT, ".snapshot")):
            with rsm.fetch_index(md, index_type) as f:
                assert hashlib.sha256(f.read()).hexdigest() == _local(variant, md, suffix)["sha256"]
        if md.txn_index_empty:
            with pytest.raises(rsm_plugins.api.RemoteResourceNotFoundError):
                rsm.fetch_index(md, IndexType.TRANSACTION)
        else:
            with rsm.fetch_index(md, IndexType.TRANSACTION) as f:
                assert hashlib.sha256(f.read()).hexdigest() == _local(variant, md, ".txnindex")["sha256"]
        with rsm.fetch_index(md, IndexType.LEADER_EPOCH) as f:
            text = f.read().decode()
        assert text.splitlines()[:2] == ["0", str(len(md.segment_leader_epochs))]


def test_ranges_across_chunk_boundaries_match_the_whole(variant: str) -> None:
    rsm = rsm_plugins.load(AIVEN_CLASS, {**plugin_block(variant), "decoded.cache.bytes": 0})
    md = max(_segments(variant), key=lambda m: m.segment_size_in_bytes)
    with rsm.fetch_log_segment(md, 0) as f:
        whole = f.read()
    c = 65536
    n = len(whole)
    for start, end in [(0, 0), (c - 1, c), (c - 5, 2 * c + 5), (1, n - 2), (n - 1, n - 1), (3 * c, None),
                       (c, 10 * n)]:
        with rsm.fetch_log_segment(md, start, end) as f:
            got = f.read()
        assert got == whole[start:None if end is None else end + 1], (start, end)
    with pytest.raises(rsm_plugins.api.RemoteRangeError):
        rsm.fetch_log_segment(md, n)


def test_plugin_survives_pickling_for_spark_executors(variant: str) -> None:
    rsm = rsm_plugins.load(AIVEN_CLASS, plugin_block(variant))
    md = _segments(variant)[0]
    with rsm.fetch_log_segment(md, 100, 70000) as f:
        before = f.read()
    clone = pickle.loads(pickle.dumps(rsm))
    with clone.fetch_log_segment(md, 100, 70000) as f:
        assert f.read() == before


def test_long_reads_are_decoded_lazily_and_exactly(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import rsm_plugins.aiven as aiven

    monkeypatch.setattr(aiven, "_GROUP_BYTES", 2 * 65536)  # a fixture segment spans several groups
    rsm = rsm_plugins.load(AIVEN_CLASS, {**plugin_block(variant), "decoded.cache.bytes": 0})
    for md in _segments(variant)[:4]:
        with rsm.fetch_log_segment(md, 0) as f:
            pieces = []
            while piece := f.read(50_000):
                pieces.append(piece)
        assert hashlib.sha256(b"".join(pieces)).hexdigest() == _local(variant, md, ".log")["sha256"]
        with rsm.fetch_log_segment(md, 70_000, md.segment_size_in_bytes - 3) as f:
            part = f.read()
        assert len(part) == md.segment_size_in_bytes - 3 - 70_000 + 1
