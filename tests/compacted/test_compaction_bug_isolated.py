"""An unexpected error inside a remote compaction (a bug: not an ``RlmError``) stays in that
partition's compaction, as Kafka's cleaner marks a partition uncleanable and goes on: it is logged
and counted, the partition is not compacted again until the daemon restarts, and its copying and
retention go on. Before, the error escaped ``RemoteCompactor.run`` and failed the whole partition
pass, expiry included, on every pass (found by the replacement property test: a ``ValueError``
from the engine's ``.txnindex`` writer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.compacted.property_world import Broker, Sidecar, daemon_config

IDEMPOTENT = 7


class _EngineBug(Exception):
    """Not an RlmError: what a bug in the engine raises."""


def test_an_unexpected_error_marks_the_partition_uncleanable_and_copying_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = Broker(tmp_path / "logs", tmp_path / "scratch",
                    {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.01"})
    sidecar = Sidecar(daemon_config(tmp_path, "compact,delete"), broker)
    calls: list[Any] = []

    def broken_engine(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise _EngineBug("boom")

    monkeypatch.setattr("rlm.daemon.remote_compaction.compact", broken_engine)
    try:
        for n in range(3):  # three rolled segments, the same keys: a range is due at once
            broker.append([(b"k%d" % i, b"v%d-%d" % (i, n)) for i in range(5)], producer_id=IDEMPOTENT)
            broker.roll()
        assert sidecar.tier() == 3
        before = list(sidecar.segments())

        assert sidecar.compact() == 0, "the error must not escape the job"
        assert len(calls) == 1, "the engine ran (the range was due) and failed"
        assert sidecar.ctx.metrics.errors.labels("_EngineBug", "compaction")._value.get() == 1
        assert broker.tip in sidecar.compactor.uncleanable
        assert sidecar.segments() == before, "nothing published or deleted by the failed compaction"

        assert sidecar.compact() == 0
        assert len(calls) == 1, "an uncleanable partition is not compacted again"
        broker.append([(b"k9", b"later")], producer_id=IDEMPOTENT)
        broker.roll()
        assert sidecar.tier() == 1, "copying goes on"
    finally:
        sidecar.close()
