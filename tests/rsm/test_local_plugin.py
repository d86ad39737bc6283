"""``local`` plugin behaviour beyond the contract: commit marker, temp files, corruption, copy paths."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest

import rsm_plugins
from rlm.errors import RemoteResourceNotFoundError, RemoteStorageError, RemoteStorageIntegrityError
from rlm.types import IndexType
from rsm_plugins import local
from rsm_plugins.layout import SegmentFileType
from rsm_plugins.local import LocalRemoteStorageManager
from rsm_plugins.testing import FaultInjectingRSM, SegmentFactory, finished, read_all


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


class _ClosingSignals(io.BufferedReader):
    """A source file that says when its reader closed it (the .log copy has read it all)."""

    def __init__(self, path: Path, closed: threading.Event) -> None:
        super().__init__(io.FileIO(path, "rb"))
        self._closed_event = closed

    def close(self) -> None:
        super().close()
        self._closed_event.set()


def test_small_files_are_written_while_the_log_copies(
    rsm: LocalRemoteStorageManager, segments: SegmentFactory
) -> None:
    """The offset index can only be written once the .log copy has started: a copy that writes
    the small files first (one fsync after another, before the .log) waits for ever (bounded
    here: the gate gives up and the copy fails); one that writes them beside the .log lands all."""
    seg = segments.make(20_000_000)  # large enough for the threaded kernel copy
    log_started = threading.Event()
    gave_up: list[str] = []
    plain_open = rsm.open_source

    def gated_open(path: Path) -> Any:
        if Path(path) == seg.data.log_segment:
            log_started.set()
        elif Path(path) == seg.data.offset_index and not log_started.wait(60):
            gave_up.append(str(path))
            raise OSError("the .log copy never started while its offset index was being written")
        return plain_open(path)

    rsm.open_source = gated_open  # type: ignore[method-assign]
    md = finished(seg.metadata, rsm.copy_log_segment_data(seg.metadata, seg.data))
    assert gave_up == []
    assert read_all(rsm.fetch_log_segment(md, 0)) == seg.log
    assert read_all(rsm.fetch_index(md, IndexType.OFFSET)) == seg.data.offset_index.read_bytes()


def test_log_appears_only_after_every_other_file(
    rsm: LocalRemoteStorageManager, segments: SegmentFactory
) -> None:
    """The .log stays the commit marker with the small files written beside it: the time index is
    held back until the .log's source has been copied whole, and at that moment the final .log
    name must not exist yet (it is renamed only once every other file is in place)."""
    seg = segments.make(3_000_000)
    log_read = threading.Event()
    seen: list[bool] = []
    gave_up: list[str] = []
    plain_open = rsm.open_source
    final_log = rsm.path_of(seg.metadata, SegmentFileType.SEGMENT)

    def gated_open(path: Path) -> Any:
        if Path(path) == seg.data.log_segment:
            return _ClosingSignals(Path(path), log_read)
        if Path(path) == seg.data.time_index:
            if not log_read.wait(60):
                gave_up.append(str(path))
                raise OSError("the .log was never copied while its time index was held back")
            seen.append(final_log.exists())
        return plain_open(path)

    rsm.open_source = gated_open  # type: ignore[method-assign]
    md = finished(seg.metadata, rsm.copy_log_segment_data(seg.metadata, seg.data))
    assert gave_up == [] and seen == [False]
    assert final_log.exists()
    assert read_all(rsm.fetch_index(md, IndexType.TIMESTAMP)) == seg.data.time_index.read_bytes()


def test_failed_small_file_beside_the_log_copy_leaves_nothing(
    tmp_path: Path, segments: SegmentFactory
) -> None:
    """A small file fails while the .log is being copied beside it: the copy raises the typed
    error, and once it returns no file of the segment is left, finished or temporary (the clean-up
    waits for every writer of the copy first)."""
    root = tmp_path / "remote"
    seg = segments.make(20_000_000)
    faulty = FaultInjectingRSM(rsm_plugins.load("local", {"root": str(root)}))
    faulty.fail_source_read(SegmentFileType.TIME_INDEX, after_bytes=0)
    with pytest.raises(RemoteStorageError) as ei:
        faulty.copy_log_segment_data(seg.metadata, seg.data)
    assert ei.value.retriable
    assert [p for p in root.rglob("*") if p.is_file()] == []
