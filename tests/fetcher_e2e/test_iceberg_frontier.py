"""``rlm iceberg`` on the shared mixed topic: a leader bounce (two leader epochs), committed and
aborted transactions, a transaction left open at the frontier, and the broker's own retention
having deleted every tiered segment locally (so rows can only come from remote storage).

The table equals what the broker's consumers read (recorded before the local deletion): with
read_committed, the committed records up to the end of the last segment the table may take (its
transactions decided: the read_committed bound, see docs/iceberg.md) — never a record of the
open transaction, never an aborted one; with read_uncommitted, every record of the remote tier.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fetcher_e2e.conftest import Tiered

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _rows(table: Any) -> list[tuple[Any, ...]]:
    t = table.scan().to_arrow().sort_by([("offset", "ascending")])
    return [
        (
            r["offset"],
            r["timestampType"] + 1,
            int(r["timestamp"].timestamp() * 1000),
            r["key"],
            r["value"],
            tuple((h["key"], h["value"]) for h in (r["headers"] or [])),
        )
        for r in t.to_pylist()
    ]


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_table_equals_the_brokers_consumer_at_the_frontier(
    tiered: Tiered, fetcher: Any, tmp_path: Path, isolation: str
) -> None:
    from pyiceberg.catalog import load_catalog

    from rlm.config import IcebergConfig
    from rlm.tables import IcebergSync, read_ledger

    (tmp_path / "wh").mkdir()
    catalog = load_catalog(
        "rlm", type="sql", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri()
    )
    sync = IcebergSync(fetcher, catalog, IcebergConfig(isolation=isolation), tiered.topic)
    r = sync.run_once()
    plan = fetcher.plan(tiered.topic, 0)
    assert len({e for e, _ in plan.lineage}) >= 2  # the leader bounce: segments of two epochs
    ledger = read_ledger(sync.table)
    end = ledger.next_offset[0]
    rows = _rows(sync.table)
    if isolation == "read_committed":
        bound = fetcher.committed_bound(tiered.topic, 0).stable_offset
        taken = [s for s in plan.segments if s.last + 1 <= bound]
        assert r.added_segments == len(taken) and r.waiting == len(plan.segments) - len(taken)
        assert end == (taken[-1].last + 1 if taken else 0)
        assert rows == [x for x in tiered.committed if x[0] < end]
        assert not any((x[3] or b"").startswith(b"open") for x in rows)  # the open transaction
    else:
        assert r.added_segments == len(plan.segments) and end == tiered.remote_end
        assert rows == [x for x in tiered.uncommitted if x[0] < end]
    assert sync.run_once().added_segments == 0
