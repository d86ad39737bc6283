"""Fixtures of the compacted-topic tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_remote_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's remote compaction job does nothing (in this process).

    For the tests of what the *copier* does with segments the broker's cleaner rewrote: remote
    compaction replaces remote segments on purpose (tests/compaction, the job's own tests), which
    would hide whether a copy ever rewrote or re-copied a tiered range.
    """
    from rlm.daemon.remote_compaction import RemoteCompactor

    monkeypatch.setattr(RemoteCompactor, "run", lambda *args, **kwargs: 0)
