"""Spark's source (``kafka-tiered``) over a compacted topic tiered and compacted remotely beside a
real broker.

tests/compacted/test_spark_gaps.py reads written files; here the history is the broker's own: a
``compact,delete`` topic gets the keyed workload (updates to many keys, tombstones, a committed and
an aborted transaction, deleted keys written again, an idempotent producer) on the session broker,
the daemon tiers it (the broker's cleaner held back) and its remote compaction job then replaces
the tiered segments with one compacted segment (gaps where superseded records were, aborted data
and transaction markers gone); then, with compaction held back, an aborted transaction and more
updates are tiered as written after it. Spark reads the tiered range at both isolation levels, in
one task per segment and in many small split tasks, and from an offset the compaction removed: the
rows are exactly what ``rlm fetch`` (the read core) returns for the same range — offsets, keys,
values — and read_committed has no aborted record while read_uncommitted has the later ones.
Replayed in offset order with the broker's local part after it, Spark's read_committed rows end,
for every key, with the value a reference topic (same workload, ``compact``, cleaned by the
broker's cleaner alone) holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fetcher.spark
from rlm.log.partition import PartitionDir
from tests.compacted.helpers import (
    KEYS,
    Row,
    Written,
    _round,
    final_of,
    high_watermark,
    read_from,
    set_topic_config,
    update_keys,
    wait_cleaned_past,
)
from tests.compacted.test_compact_topic import CLEANING, NO_CLEANING
from tests.compacted.test_reference_after_compaction import _last_tombstone, topic_and_reference
from tests.compacted.test_replacement import fetch, finished_of, tier_once
from tests.daemon.helpers import transactional_producer, wait_for
from tests.faults.proc_helpers import all_segments

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]
ISOLATIONS = ("read_committed", "read_uncommitted")
SPLIT_BYTES = str(64 * 1024)  # every segment (hundreds of KB) read by several tasks


def _opt_bytes(b: Any) -> bytes | None:
    return None if b is None else bytes(b)


def tiered_frame(spark: Any, cfg: Path, topic: str, isolation: str, *, split_bytes: str | None = None,
                 start: int | None = None, end: int | None = None) -> Any:
    """The ``kafka-tiered`` DataFrame of ``topic`` (partition 0 only here)."""
    r = (spark.read.format("kafka-tiered").option("rlm.config", str(cfg)).option("subscribe", topic)
         .option("kafka.isolation.level", isolation))
    if split_bytes is not None:
        r = r.option("rlm.splitBytes", split_bytes)
    if start is not None:
        r = r.option("startingOffsets", json.dumps({topic: {"0": start}}))
    if end is not None:
        r = r.option("endingOffsets", json.dumps({topic: {"0": end}}))
    return r.load()


def rows_of(df: Any) -> list[Row]:
    """(offset, key, value) rows by offset."""
    rows = df.select("partition", "offset", "key", "value").collect()
    assert {row.partition for row in rows} <= {0}
    return sorted((row.offset, _opt_bytes(row.key), _opt_bytes(row.value)) for row in rows)


def aborted_transaction(bootstrap: str, topic: str, w: Written) -> None:
    """Updates to keys 100..149 in a transaction the broker logs and then aborts."""
    tx = transactional_producer(bootstrap, f"{topic}-late-tx")
    tx.begin_transaction()
    _round(tx, topic, range(100, 150), "late-aborted", w, aborted=True)
    assert tx.flush(30) == 0  # acknowledged (offsets known) before the abort
    tx.abort_transaction(30)


def test_spark_reads_a_remotely_compacted_topic_as_rlm_fetch(
    kafka: Any, spark: Any, unique_topic: str, tmp_path: Path
) -> None:
    bs = kafka.bootstrap
    topic, reference = unique_topic, f"{unique_topic}-ref"
    written_ref, (cfg, written, tip) = topic_and_reference(kafka, topic, reference, tmp_path)

    # tiered, then compacted remotely: one new segment replaces the first tiered ones
    assert tier_once(cfg)["compactions"] == 0
    tiered = finished_of(all_segments(cfg, tip, tmp_path / "r0"))
    set_topic_config(bs, topic, **CLEANING)
    assert tier_once(cfg)["compactions"] == 1
    segs = finished_of(all_segments(cfg, tip, tmp_path / "r1"))
    assert segs[0].start_offset == 0 and segs[0].end_offset >= _last_tombstone(written)
    assert segs[0].remote_log_segment_id not in {m.remote_log_segment_id for m in tiered}
    # then, with compaction held back again, more tiered as written: an aborted transaction (the
    # compaction removed the first one) and updates to other keys, the same into the reference
    set_topic_config(bs, topic, **NO_CLEANING)
    hw = high_watermark(bs, topic)
    aborted_transaction(bs, topic, written)
    for r in range(5):  # more than a segment
        update_keys(bs, topic, range(150, KEYS), f"late{r}", written)
        update_keys(bs, reference, range(150, KEYS), f"late{r}", written_ref)
    pdir = kafka.log_dir / f"{topic}-0"
    wait_for("a new rolled segment", lambda: PartitionDir(pdir).segments[-1].base_offset > hw)
    assert tier_once(cfg)["compactions"] == 0
    later = finished_of(all_segments(cfg, tip, tmp_path / "r2"))
    assert later[: len(segs)] == segs and len(later) > len(segs), "tiered after the compacted segment"
    segs = later
    remote_end = segs[-1].end_offset + 1

    fetcher.spark.register(spark)
    committed: list[Row] = []
    for iso in ISOLATIONS:
        want = fetch(cfg, topic, 0, remote_end, iso)
        offsets = [o for o, _, _ in want]
        assert offsets == sorted(set(offsets)) and len(offsets) < remote_end, f"{iso}: gaps expected"
        assert all(written.records[o] == (k, v) for o, k, v in want), f"{iso}: rlm fetch as written"
        assert rows_of(tiered_frame(spark, cfg, topic, iso)) == want, f"{iso}: one task per segment"
        split = tiered_frame(spark, cfg, topic, iso, split_bytes=SPLIT_BYTES)
        assert split.rdd.getNumPartitions() > len(segs), "the compacted segment read by several tasks"
        assert rows_of(split) == want, f"{iso}: split tasks"
        if iso == "read_committed":
            assert not set(offsets) & written.aborted, "read_committed never shows aborted data"
            committed = want
        else:
            assert set(offsets) & written.aborted, "the later aborted transaction is in the history"

    # a range starting at an offset compaction removed: served from the next offset that exists
    kept = {o for o, _, _ in committed}
    gap = next(o for o in range(1, remote_end) if o not in kept and o - 1 in kept)
    end = min(remote_end, gap + 2000)
    want = fetch(cfg, topic, gap, end, "read_committed")
    assert want and want[0][0] > gap
    assert rows_of(tiered_frame(spark, cfg, topic, "read_committed", start=gap, end=end)) == want

    # Spark's history + the broker's part ends, for every key, with what the broker's cleaner keeps
    wait_cleaned_past(kafka.log_dir, reference, _last_tombstone(written_ref))
    hw_ref = high_watermark(bs, reference)
    expected = final_of(read_from(bs, reference, 0, "read_committed", hw_ref))
    assert expected == written_ref.final() == written.final(), "the same workload into both topics"
    local = read_from(bs, topic, remote_end, "read_committed", high_watermark(bs, topic))
    assert final_of(committed + local) == expected
