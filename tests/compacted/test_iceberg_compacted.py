"""``rlm iceberg`` on a compacted topic whose remote history is replaced by remote compaction.

The table's semantics for compacted topics is **append of what remains** (docs/iceberg.md,
*Compacted topics*): each (partition, offset) is appended once, as the remote tier held it when
the writer first reached it; a later compaction never removes or rewrites rows already in the
table, and offsets the writer reaches only after a compaction come from the compacted segment
(the records compaction removed are not there). The latest value per key is a query.

Beside the real broker: the keyed workload is tiered (compaction held back) and ``rlm iceberg``
appends it; then newer values and tombstones for old keys are written and rolled, compaction is
allowed and one daemon pass tiers them and compacts the remote history; ``rlm iceberg`` runs
again. The table then holds every (partition, offset) once, the first run's rows unchanged, after
them exactly the remote history read back from the compacted tier (records compaction removed
absent), and the documented latest-per-key query gives the model's (the broker's) final value for
every key whose last record is in the table (a key whose last record is a tombstone: absent), and
for every key once the broker's log from the table's end continues it (a key written again above
the table's end may show an older value than its last one below it: remote compaction removed
that one, superseded by the broker's newer record, as the broker's own cleaner does).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from rlm.log.partition import PartitionDir
from tests.compacted.helpers import (
    KEYS,
    Written,
    high_watermark,
    key,
    read_from,
    set_topic_config,
    update_keys,
)
from tests.compacted.test_compact_topic import CLEANING
from tests.compacted.test_replacement import fetch, finished_of, setup_topic, tier_once
from tests.daemon.helpers import wait_for
from tests.faults.proc_helpers import all_segments, rlm

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

#: the latest-per-key query of docs/iceberg.md (*Compacted topics*), as written there
LATEST_PER_KEY = """
SELECT "partition", key, value FROM (
  SELECT "partition", key, value,
         row_number() OVER (PARTITION BY "partition", key ORDER BY "offset" DESC) AS rn
  FROM t
) WHERE rn = 1 AND value IS NOT NULL
"""

TOMBSTONED = range(150, 170)  # keys with values in the first run's rows, deleted afterwards
TableRow = tuple[int, bytes | None, bytes | None, str]  # offset, key, value, segment_id


def run_iceberg(cfg: Path, topic: str) -> dict[str, Any]:
    res = rlm("iceberg", "--config", str(cfg), "--topic", topic, "--json", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return dict(json.loads(res.stdout))


def table_rows(out: dict[str, Any]) -> list[TableRow]:
    """Every row of the table ``rlm iceberg --json`` names (partition 0 only is written)."""
    t = load_catalog(out["catalog_name"], **out["catalog"]).load_table(out["table"])
    data = t.scan(selected_fields=("partition", "offset", "key", "value", "segment_id")).to_arrow()
    assert set(data.column("partition").to_pylist()) <= {0}
    return list(zip(data.column("offset").to_pylist(), data.column("key").to_pylist(),
                    data.column("value").to_pylist(), data.column("segment_id").to_pylist(), strict=True))


def latest_per_key(rows: list[TableRow]) -> dict[bytes, bytes]:
    """The documented query, run by SQLite (standard SQL window function) over the table's rows."""
    db = sqlite3.connect(":memory:")
    db.execute('CREATE TABLE t ("partition" INTEGER, "offset" INTEGER, key BLOB, value BLOB)')
    db.executemany("INSERT INTO t VALUES (0, ?, ?, ?)", [(o, k, v) for o, k, v, _ in rows])
    return {bytes(k): bytes(v) for _, k, v in db.execute(LATEST_PER_KEY)}


def settled_keys(written: Written, end: int) -> set[bytes]:
    """The keys whose last committed record is below ``end`` (in the table once it reached ``end``).

    A key written again above it may show an older value in the table than its last one below
    ``end``: remote compaction removes a remote record a newer one in the broker's log supersedes
    (as the broker's cleaner would), before the table holds the newer one."""
    last: dict[bytes, int] = {}
    for off in sorted(o for o in written.records if o not in written.aborted):
        k = written.records[off][0]
        assert k is not None
        last[k] = off
    return {k for k, off in last.items() if off < end}


def test_iceberg_appends_what_remains_after_remote_compaction(
    kafka: Any, unique_topic: str, tmp_path: Path
) -> None:
    topic = unique_topic
    cfg, written, tip = setup_topic(kafka, topic, tmp_path)
    assert tier_once(cfg)["compactions"] == 0, "min.compaction.lag.ms of an hour: nothing compacted"
    before = finished_of(all_segments(cfg, tip, tmp_path / "r0"))
    end1 = before[-1].end_offset + 1
    first = run_iceberg(cfg, topic)
    assert first["waiting_segments"] == 0
    rows1 = table_rows(first)
    assert sorted(o for o, *_ in rows1) == [o for o in sorted(written.records)
                                            if o < end1 and o not in written.aborted], "the history as tiered"

    # newer values, and tombstones for keys whose values the table already holds, then rolled
    hw = max(written.records) + 1
    update_keys(kafka.bootstrap, topic, TOMBSTONED, "tombstone", written)
    for r in range(6):  # more than a segment (1 MB): the updates roll
        update_keys(kafka.bootstrap, topic, range(TOMBSTONED.stop, KEYS), f"after{r}", written)
    pdir = kafka.log_dir / f"{topic}-0"
    wait_for("a new rolled segment", lambda: PartitionDir(pdir).segments[-1].base_offset > hw)
    set_topic_config(kafka.bootstrap, topic, **CLEANING)
    assert tier_once(cfg)["compactions"] == 1
    after = finished_of(all_segments(cfg, tip, tmp_path / "r1"))
    compacted = after[0]
    before_ids = {m.remote_log_segment_id.id.text for m in before}
    assert compacted.remote_log_segment_id.id.text not in before_ids
    assert compacted.start_offset == 0 and compacted.end_offset >= end1, "the compaction reaches past end1"
    end2 = after[-1].end_offset + 1

    second = run_iceberg(cfg, topic)
    assert second["waiting_segments"] == 0 and second["added_rows"] > 0
    rows2 = table_rows(second)
    offsets = sorted(o for o, *_ in rows2)
    assert offsets == sorted(set(offsets)), "each (partition, offset) once"
    assert {r for r in rows2 if r[0] < end1} == set(rows1), "rows appended before compaction kept"
    new = sorted(r for r in rows2 if r[0] >= end1)
    remaining = fetch(cfg, topic, end1, end2, "read_committed")  # the compacted tier, read back
    assert [(o, k, v) for o, k, v, _ in new] == sorted(remaining), "what remains, appended once"
    from_compacted = [o for o, *_, sid in new if sid == compacted.remote_log_segment_id.id.text]
    assert from_compacted, "offsets first appended after compaction come from the compacted segment"
    removed = [o for o in written.records
               if end1 <= o <= compacted.end_offset and o not in written.aborted and o not in set(offsets)]
    assert removed, "compaction removed superseded records of the range appended after it"
    assert all(written.records[o] == (k, v) for o, k, v, _ in rows2), "offsets and contents kept"

    latest = latest_per_key(rows2)
    settled = settled_keys(written, end2)
    assert {k: v for k, v in latest.items() if k in settled} == {
        k: v for k, v in written.final().items() if k in settled}, "latest per key = the broker's final value"
    assert not {key(k) for k in TOMBSTONED} & set(latest), "tombstoned keys absent"
    assert len(rows2) > len(latest), "history kept: superseded values appended before compaction stay"
    # a key written again above the table's end: the broker's log continues the table
    local = read_from(kafka.bootstrap, topic, end2, "read_committed", high_watermark(kafka.bootstrap, topic))
    assert set(written.final()) - settled, "keys newer in the broker than in the table (the case below)"
    assert latest_per_key(rows2 + [(o, k, v, "") for o, k, v in local]) == written.final()
