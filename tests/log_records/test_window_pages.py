"""File windows hand the pages of decoded windows to the next ones (no fresh pages to zero).

Reading a file window by window must give exactly the bytes of the file whether pages are
moved (``mremap``) or freed and faulted in anew, and released ranges must read as zeros.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlm.log import Compression, _pages, encode_batch, iter_batches, read_arrow, source

WINDOW = 64 * 1024


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    path = tmp_path / "00000000000000000000.log"
    offset = 0
    with open(path, "wb") as f:
        for b in range(60):  # ~1.3 MiB: about 20 windows
            records = [(b"k%d" % i, os.urandom(200), None, 1000 + i) for i in range(100)]
            codec = Compression.NONE if b % 2 else Compression.ZSTD
            f.write(encode_batch(records, base_offset=offset, compression=codec))
            offset += 100
    return path


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Small windows, and the lengths of the page moves made."""
    monkeypatch.setattr(source, "WINDOW", WINDOW)
    done: list[int] = []
    real = _pages.move

    def move(src: int, dst: int, length: int) -> bool:
        ok = real(src, dst, length)
        if ok:
            done.append(length)
        return ok

    monkeypatch.setattr(_pages, "move", move)
    return done


@pytest.mark.parametrize("recycle", [True, False], ids=["moved-pages", "fresh-pages"])
def test_windowed_reads_equal_the_file(
    segment: Path, moves: list[int], recycle: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if recycle and not _pages.available():
        pytest.skip("mremap(MREMAP_DONTUNMAP) is not available here")
    monkeypatch.setattr(_pages, "_usable", recycle)
    data = segment.read_bytes()
    expected = read_arrow(data, topic="t", partition=0)
    assert read_arrow(segment, topic="t", partition=0).equals(expected)
    assert list(iter_batches(segment)) == list(iter_batches(data))
    if recycle:
        assert sum(moves) > len(data) // 2  # most windows reused the pages of earlier ones
    else:
        assert moves == []


def test_released_pages_read_as_zeros_and_moved_pages_hold_the_file(segment: Path, moves: list[int]) -> None:
    if not _pages.available():
        pytest.skip("mremap(MREMAP_DONTUNMAP) is not available here")
    data = segment.read_bytes()
    with source.open_window(segment) as window:
        first = window.ensure(1)
        assert bytes(window.view[:first]) == data[:first]
        window.release(first)
        second = window.ensure(first + 1)  # reads into the pages moved from the first window
        assert moves and second > first
        assert bytes(window.view[: first // 4096 * 4096]) == bytes(first // 4096 * 4096)
        assert bytes(window.view[first:second]) == data[first:second]
        assert window.ensure(len(data)) == len(data)
        assert bytes(window.view[second:]) == data[second:]
