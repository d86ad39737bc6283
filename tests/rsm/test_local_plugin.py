"""``local`` plugin behaviour beyond the contract: commit marker, temp files, corruption, copy paths."""

from __future__ import annotations

from pathlib import Path

import pytest

import rsm_plugins
from rlm.errors import RemoteResourceNotFoundError, RemoteStorageIntegrityError
from rlm.types import IndexType
from rsm_plugins import local
from rsm_plugins.layout import SegmentFileType
from rsm_plugins.local import LocalRemoteStorageManager
from rsm_plugins.testing import SegmentFactory, finished, read_all


@pytest.fixture
def rsm(tmp_path: Path) -> LocalRemoteStorageManager:
    plugin = rsm_plugins.load("local", {"root": str(tmp_path / "remote")})
    assert isinstance(plugin, LocalRemoteStorageManager)
    return plugin


@pytest.fixture
def segments(tmp_path: Path) -> SegmentFactory:
    return SegmentFactory(tmp_path / "src")


def test_no_temp_files_left(rsm: LocalRemoteStorageManager, segments: SegmentFactory) -> None:
    seg = segments.make(100_000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    names = [p.name for p in rsm.root.rglob("*") if p.is_file()]
    assert len(names) == 6 and not [n for n in names if n.endswith(".tmp")]


def test_index_without_log_is_not_visible(rsm: LocalRemoteStorageManager, segments: SegmentFactory) -> None:
    """A crash after the indexes but before the .log rename leaves a segment that is not there."""
    seg = segments.make(1000)
    md = finished(seg.metadata, rsm.copy_log_segment_data(seg.metadata, seg.data))
    rsm.path_of(md, SegmentFileType.SEGMENT).unlink()
    with pytest.raises(RemoteResourceNotFoundError, match=r"without its \.log"):
        rsm.fetch_index(md, IndexType.OFFSET)


def test_user_space_copy_path(
    rsm: LocalRemoteStorageManager, segments: SegmentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "_kernel_copy", lambda *a: False)
    seg = segments.make(9_000_000)
    md = finished(seg.metadata, rsm.copy_log_segment_data(seg.metadata, seg.data))
    assert read_all(rsm.fetch_log_segment(md, 0)) == seg.log


def test_corruption_on_disk_is_detected(rsm: LocalRemoteStorageManager, segments: SegmentFactory) -> None:
    seg = segments.make(50_000)
    md = finished(seg.metadata, rsm.copy_log_segment_data(seg.metadata, seg.data))
    path = rsm.path_of(md, SegmentFileType.SEGMENT)
    data = bytearray(path.read_bytes())
    data[12_345] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(RemoteStorageIntegrityError, match=str(path)):
        read_all(rsm.fetch_log_segment(md, 0))
    assert read_all(rsm.fetch_log_segment(md, 0, 12_000)) == seg.log[:12_001]


def test_delete_disabled(tmp_path: Path, segments: SegmentFactory) -> None:
    rsm = rsm_plugins.load("local", {"root": str(tmp_path / "r"), "delete.enable": False})
    seg = segments.make(100)
    md = finished(seg.metadata, rsm.copy_log_segment_data(seg.metadata, seg.data))
    rsm.delete_log_segment_data(md)
    assert read_all(rsm.fetch_log_segment(md, 0)) == seg.log
