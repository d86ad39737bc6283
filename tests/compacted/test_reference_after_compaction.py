"""Issue 44's headline test: a tiered, remotely compacted topic against the broker's own cleaner.

Two topics get the same keyed workload (updates to many keys, tombstones, a committed and an
aborted transaction, deleted keys written again, an idempotent producer), then the same later
updates. The reference (``compact``, infinite local retention) is cleaned by the broker's cleaner
only. The other (``compact,delete``) is tiered by the daemon and compacted remotely — once, then
again after ``delete.retention.ms`` so the tombstones the first compaction kept are dropped — and
the broker's local retention then deletes its whole tiered range. Read from offset 0 (the
reference from the broker; the other through the merged endpoint in both isolation levels and
through ``rlm fetch`` + the broker) every key ends with the reference's value, no key whose
tombstone expired comes back, a key deleted and written again has its new value, and
read_committed never shows aborted data.

The delete horizon has to pass between two cleanings on both sides: a cleaner (Kafka's, and the
remote one, which follows it) keeps a tombstone on the pass that first meets it and removes it on
a later pass; the later updates make both topics dirty again after the horizon.

Which superseded records survive differs, so only the final value per key is compared: the broker's
cleaner never reads its active segment (a value there does not supersede older ones), while the
remote compaction takes the newer keys of the broker's whole local log below the LSO (in the runs
so far the reference kept 150 superseded ``late2`` values the tiered read did not).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.config import load_config
from rlm.log.partition import PartitionDir
from rlm.types import TopicIdPartition
from tests.compacted.helpers import (
    KEYS,
    Row,
    Written,
    final_of,
    high_watermark,
    key,
    read_from,
    set_topic_config,
    update_keys,
    wait_cleaned_past,
    write_workload,
)
from tests.compacted.test_compact_topic import CLEANING
from tests.compacted.test_replacement import COMMON, check_reads, finished_of, setup_topic, tier_once
from tests.daemon.helpers import create_topic, wait_for
from tests.faults.proc_helpers import all_segments, read_status_file

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ISOLATIONS = ("read_committed", "read_uncommitted")
DELETED = {key(k) for k in range(10, 50)}  # tombstoned by the workload, never written again
REBORN = {key(k) for k in range(10)}  # tombstoned, then written again ("reborn-…")
DELETE_RETENTION_MS = int(COMMON["delete.retention.ms"])


def _last_tombstone(w: Written) -> int:
    return max(o for o, (_, v) in w.records.items() if v is None)


def _later_updates(bootstrap: str, topic: str, w: Written) -> None:
    """More than a segment of updates to keys the workload neither deleted nor aborted."""
    for r in range(5):
        update_keys(bootstrap, topic, range(150, KEYS), f"late{r}", w)


def _check_outcome(name: str, rows: list[Row], reference: dict[bytes, bytes], w: Written) -> None:
    """What issue 44 asks of a reader from offset 0, given the reference topic's final values."""
    offsets = [o for o, _, _ in rows]
    assert offsets and offsets == sorted(set(offsets)), f"{name}: each offset once, in order"
    assert all(w.records[o] == (k, v) for o, k, v in rows), f"{name}: offsets and contents kept"
    assert final_of(rows) == reference, f"{name}: the reference's final value for every key"
    assert not {k for _, k, _ in rows} & DELETED, f"{name}: a key whose tombstone expired came back"
    final = final_of(rows)
    assert all(final[k].startswith(b"reborn-") for k in REBORN), f"{name}: deleted then re-written"


def topic_and_reference(kafka: Any, topic: str, reference: str, tmp_path: Path
                        ) -> tuple[Written, tuple[Path, Written, TopicIdPartition]]:
    """The reference (``compact``, cleaned by the broker alone) and the topic under test
    (``compact,delete``, the cleaner held back, tiered by the sidecar) fed the same workload:
    the reference's record of what was written, and :func:`setup_topic`'s answer for the topic."""
    create_topic(kafka.bootstrap, reference, 1, 1, **{"cleanup.policy": "compact", **COMMON, **CLEANING})
    written_ref = write_workload(kafka.bootstrap, reference, rounds=4)  # setup_topic's workload, same rounds
    return written_ref, setup_topic(kafka, topic, tmp_path)


def test_tiered_remotely_compacted_topic_reads_as_the_reference(
    kafka: Any, unique_topic: str, tmp_path: Path
) -> None:
    bs = kafka.bootstrap
    topic, reference = unique_topic, f"{unique_topic}-ref"
    written_ref, (cfg, written, tip) = topic_and_reference(kafka, topic, reference, tmp_path)

    # tier, then compact remotely: the metadata shows a compacted segment replacing the first ones
    assert tier_once(cfg)["compactions"] == 0
    tiered = finished_of(all_segments(cfg, tip, tmp_path / "r0"))
    assert len(tiered) >= 2 and tiered[0].end_offset < _last_tombstone(written), tiered
    set_topic_config(bs, topic, **CLEANING)
    assert tier_once(cfg)["compactions"] == 1
    first = finished_of(all_segments(cfg, tip, tmp_path / "r1"))
    assert first[0].start_offset == 0 and first[0].end_offset >= _last_tombstone(written)
    assert first[0].remote_log_segment_id not in {m.remote_log_segment_id for m in tiered}
    compacted_ms = read_status_file(tmp_path / "work")["partitions"][f"{topic}-0"]["compaction"]["last_ms"]
    # the reference's cleaner has met the tombstones (and given them their delete horizon)
    wait_cleaned_past(kafka.log_dir, reference, _last_tombstone(written_ref))
    met_ms = time.time() * 1000

    # past both delete horizons, the same later updates make both topics dirty again
    wait_for("delete horizons passed",
             lambda: time.time() * 1000 > max(compacted_ms, met_ms) + DELETE_RETENTION_MS)
    hw_ref = high_watermark(bs, reference)
    hw = high_watermark(bs, topic)
    _later_updates(bs, reference, written_ref)
    _later_updates(bs, topic, written)
    pdir = kafka.log_dir / f"{topic}-0"
    wait_for("a new rolled segment", lambda: PartitionDir(pdir).segments[-1].base_offset > hw)
    assert tier_once(cfg)["compactions"] == 1
    second = finished_of(all_segments(cfg, tip, tmp_path / "r2"))
    assert second[0].start_offset == 0 and second[0].end_offset > first[0].end_offset
    assert second[0].remote_log_segment_id not in {m.remote_log_segment_id for m in first}
    wait_cleaned_past(kafka.log_dir, reference, hw_ref)

    # the broker's local retention deletes the tiered range (size retention keeps the active segment)
    remote_end = second[-1].end_offset + 1
    assert remote_end == PartitionDir(pdir).segments[-1].base_offset, "every rolled segment tiered"
    set_topic_config(bs, topic, **{"retention.bytes": "1"})
    wait_for("local segments deleted", lambda: PartitionDir(pdir).segments[0].base_offset >= remote_end)
    hw = high_watermark(bs, topic)

    hw_ref = high_watermark(bs, reference)
    ref = {iso: read_from(bs, reference, 0, iso, hw_ref) for iso in ISOLATIONS}
    expected = final_of(ref["read_committed"])
    assert expected == written_ref.final(), "the reference topic: the broker's own answer"
    assert expected == written.final(), "the same workload into both topics"
    for iso, rows in ref.items():
        _check_outcome(f"reference {iso}", rows, expected, written_ref)
    assert not {o for o, _, _ in ref["read_committed"]} & written_ref.aborted

    fetcher = RemoteFetcher.from_config(load_config(cfg))
    try:
        with EndpointThread(fetcher, ListenerSettings(port=0, merged=True), tmp_path / "merged") as ep:
            merged = {iso: read_from(ep.bootstrap, topic, 0, iso, hw) for iso in ISOLATIONS}
    finally:
        fetcher.close()
    for iso, rows in merged.items():
        _check_outcome(f"merged {iso}", rows, expected, written)
    assert not {o for o, _, _ in merged["read_committed"]} & written.aborted

    # rlm fetch (the remote history) + the broker (its local part); check_reads asserts read_committed
    # has no aborted data and every key's latest value, and every offset once in both levels
    remote = check_reads(cfg, kafka, topic, written, remote_end)
    local = read_from(bs, topic, remote_end, "read_committed", hw)
    _check_outcome("rlm fetch + broker", remote + local, expected, written)
    assert remote + local == merged["read_committed"], "the endpoint and rlm fetch + broker agree"
