"""``rlm restore`` of a compacted history whose data segment indexes an abort ahead of its marker
(rlm.daemon.aborts_ahead), into a real broker.

The history: an aborted transaction's data at 0 tiered while its ABORT (1) was local; the same
producer's committed transaction (2, COMMIT 3); two passes of the broker's cleaner (played by the
engine, tests/compacted/property_world.py) removed the data locally and dropped the marker's
``.txnindex`` entry; then the rest tiered. Remotely: ``[0, 0]`` with the entry (ahead of its
marker) and ``[1, 3]`` (marker, data, COMMIT) with none. Restored, the broker loads the segment
whose index names a marker in the next segment, and serves what ``rlm fetch`` reads at both
isolation levels: read_committed never the aborted record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.config import load_config
from rlm.lineage import finished_only
from rlm.log.txn_index import parse_txn_index
from rlm.types import IndexType
from tests.compacted.property_world import TOPIC, Broker, Sidecar, data_tiered_ahead_of_its_abort
from tests.compacted.test_restore_tail import restored

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _config(root: Path) -> dict[str, Any]:
    return {
        "log_dirs": [str(root / "logs")],
        "work_dir": str(root / "work"),
        "storage": {"plugin": "local", "config": {"root": str(root / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(root / "work" / "metadata")}},
        "topics": [{"pattern": TOPIC, "remote.storage.enable": True, "cleanup.policy": "compact,delete",
                    "retention.ms": -1}],
        "http": {"enabled": False},
    }


def test_restored_abort_indexed_ahead_is_served_by_the_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(_config(tmp_path)))
    broker = Broker(tmp_path / "logs", tmp_path / "scratch", {"cleanup.policy": "compact,delete"})
    sidecar = Sidecar(load_config(cfg), broker)
    try:
        data_tiered_ahead_of_its_abort(broker, sidecar, 2)
        assert broker.clean() and broker.clean()
        sidecar.tier()
        segs = sorted(finished_only(sidecar.segments()), key=lambda m: m.start_offset)
        spans = [(m.start_offset, m.end_offset, m.txn_index_empty) for m in segs]
        assert spans == [(0, 0, False), (1, 3, True)]
        with sidecar.ctx.rsm.fetch_index(segs[0], IndexType.TRANSACTION) as s:
            assert [(a.producer_id, a.first_offset, a.last_offset)
                    for a in parse_txn_index(s.read(), base_offset=0)] == [(2, 0, 1)]
    finally:
        sidecar.close()

    with restored(cfg, "restore-aborts-ahead", 0, capsys, TOPIC) as (_b, remote):
        assert [o for o, _, _ in remote["read_committed"]] == [2]
        assert [o for o, _, _ in remote["read_uncommitted"]] == [0, 2]
