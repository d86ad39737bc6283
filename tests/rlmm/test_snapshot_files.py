"""Atomic snapshot files and the ``_rlmm_committed_offsets`` file."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.errors import MetadataDecodeError
from rlmm import snapshot_files as sf


def test_snapshot_write_read_replace_delete(tmp_path: Path) -> None:
    assert sf.read_snapshot(tmp_path, 3) is None
    sf.write_snapshot(tmp_path, 3, b"one")
    sf.write_snapshot(tmp_path, 3, b"two")
    assert sf.read_snapshot(tmp_path, 3) == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["remote_log_snapshot-3"]  # no temp files left
    sf.delete_snapshot(tmp_path, 3)
    sf.delete_snapshot(tmp_path, 3)
    assert sf.read_snapshot(tmp_path, 3) is None


def test_stale_temp_files_are_removed(tmp_path: Path) -> None:
    (tmp_path / ".remote_log_snapshot-1.abc.tmp").write_bytes(b"partial")
    sf.write_snapshot(tmp_path, 1, b"x")
    sf.remove_stale_temp_files(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["remote_log_snapshot-1"]


def test_committed_offsets_round_trip(tmp_path: Path) -> None:
    assert sf.read_committed_offsets(tmp_path) == {}
    sf.write_committed_offsets(tmp_path, {12: 40, 3: -1, 0: 7})
    assert (tmp_path / "_rlmm_committed_offsets").read_text() == "0 7\n3 -1\n12 40\n"
    assert sf.read_committed_offsets(tmp_path) == {0: 7, 3: -1, 12: 40}


@pytest.mark.parametrize(("text", "reason"), [
    (b"0 1\n0 2\n", "repeated"),
    (b"0\n", "expected '<partition> <offset>'"),
    (b"a b\n", "expected"),
    (b"-1 5\n", "negative"),
    (b"\xff\xfe", "not ASCII"),
])
def test_malformed_committed_offsets(tmp_path: Path, text: bytes, reason: str) -> None:
    (tmp_path / "_rlmm_committed_offsets").write_bytes(text)
    with pytest.raises(MetadataDecodeError, match=reason):
        sf.read_committed_offsets(tmp_path)
