"""Checks shared by the tests that compare the compiled decoder's C-library paths (libzstd, liblz4,
libdeflate, the snappy kernel) with the per-batch Python path: same table, same rows, jitted or not."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from rlm.log import codecs, read_arrow
from tests.log_records._data import mixed_log


def python_path(data: bytes, monkeypatch: pytest.MonkeyPatch, target: object, name: str, none: object,
                **kw: object) -> pa.Table:
    """``data`` decoded with the library switched off (``target.name = none``): the Python path."""
    with monkeypatch.context() as m:
        m.setattr(target, name, none)
        return read_arrow(data, topic="t", partition=0, **kw)  # type: ignore[arg-type]


def forbid_python_decompression(monkeypatch: pytest.MonkeyPatch, library: str) -> Callable[..., bytes]:
    """Make any per-batch Python decompression fail the test (the compiled loop must do it all)."""

    def refuse(codec: int, *args: object, **kwargs: object) -> bytes:
        raise AssertionError(f"Python decompression of codec {codec} with {library} present")

    monkeypatch.setattr(codecs, "decompress", refuse)
    return refuse


def assert_decodes_to(data: bytes, expected: pa.Table) -> None:
    """The jitted decode is a valid table equal to ``expected``, and so is the un-jitted one."""
    table = read_arrow(data, topic="t", partition=0)
    table.validate(full=True)
    assert table.equals(expected)
    assert read_arrow(data, topic="t", partition=0, pure_python=True).equals(expected)


def assert_mixed_log_same_on_every_path(expected_of: Callable[[bytes], pa.Table] | None = None) -> None:
    """Every codec, transactions and offset gaps (:func:`mixed_log`), whole and in offset ranges:
    jitted equals un-jitted, and the whole log equals ``expected_of(data)`` when given."""
    data, _ = mixed_log()
    expected = expected_of(data) if expected_of is not None else None
    for lo, hi in [(None, None), (3, 50), (100, 1000)]:
        kw = {"start_offset": lo, "end_offset": hi}
        jit = read_arrow(data, topic="t", partition=0, **kw)  # type: ignore[arg-type]
        assert jit.equals(read_arrow(data, topic="t", partition=0, pure_python=True, **kw))  # type: ignore[arg-type]
        if lo is None and expected is not None:
            assert jit.equals(expected)
