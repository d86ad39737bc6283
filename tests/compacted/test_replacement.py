"""Remote compaction's replacement, end to end beside the real broker (``compact,delete`` topic).

The daemon tiers the keyed workload (the broker's cleaner held back), then, with compaction
allowed, its remote compaction job compacts the tiered segments into one: the metadata shows the
new segment FINISHED and every input gone through DELETE (no object left), the remote history
reads back from offset 0 (``rlm fetch``, both isolation levels, then the broker) with every
offset once and its own content and, read_committed, every key's latest value; the compacted
segment is smaller, ``rlm status`` and the metrics count the compaction, ``rlm verify --deep``
is clean and ``rlm metadata rebuild`` from the bucket alone gives the same segments.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.lineage import chain, judge_segments, lineage_from_segments
from rlm.log.partition import PartitionDir
from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
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
    write_workload,
)
from tests.compacted.test_compact_topic import CLEANING, NO_CLEANING, _raw_config
from tests.daemon.helpers import create_topic, wait_for
from tests.faults.proc_helpers import (
    all_segments,
    child_env,
    read_status_file,
    rlm,
    stored_segment_ids,
    verify,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
COMMON = {"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"}
S = RemoteLogSegmentState


def setup_topic(kafka: Any, topic: str, tmp: Path) -> tuple[Path, Written, TopicIdPartition]:
    """A compact,delete topic with the workload, its config file (JSON log), the cleaner held back."""
    create_topic(kafka.bootstrap, topic, **{"cleanup.policy": "compact,delete", **COMMON, **NO_CLEANING})
    written = write_workload(kafka.bootstrap, topic, rounds=4)
    cfg = tmp / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({**_raw_config(kafka, topic, tmp), "log_format": "json"}))
    tip = TopicIdPartition(PartitionDir(kafka.log_dir / f"{topic}-0").topic_id, topic, 0)
    return cfg, written, tip


def finished_of(segs: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
    return sorted((m for m in segs if m.state is S.COPY_SEGMENT_FINISHED), key=lambda m: m.start_offset)


def fetch(cfg: Path, topic: str, start: int, end: int, isolation: str) -> list[Row]:
    """``rlm fetch`` of ``[start, end)`` (the remote history) as (offset, key, value) rows."""
    res = rlm("fetch", "--config", str(cfg), "--topic", topic, "--offset", str(start), "--until-offset",
              str(end), "--isolation", isolation, "--format", "json", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]

    def unb64(s: str | None) -> bytes | None:
        return None if s is None else base64.b64decode(s)

    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    return [(r["offset"], unb64(r["key"]), unb64(r["value"])) for r in rows]


def check_reads(cfg: Path, kafka: Any, topic: str, written: Written, remote_end: int) -> list[Row]:
    """From offset 0: every offset once, with its own content; read_committed without aborted data
    and with every key's latest value. Returns the remote rows read_committed."""
    hw = high_watermark(kafka.bootstrap, topic)
    remote_committed: list[Row] = []
    for iso in ("read_committed", "read_uncommitted"):
        remote = fetch(cfg, topic, 0, remote_end, iso)
        rows = remote + read_from(kafka.bootstrap, topic, remote_end, iso, hw)
        offsets = [o for o, _, _ in rows]
        assert offsets == sorted(set(offsets)), f"{iso}: an offset read twice or out of order"
        assert all(written.records[o] == (k, v) for o, k, v in rows), f"{iso}: offsets and contents kept"
        if iso == "read_committed":
            assert not set(offsets) & written.aborted
            assert final_of(rows) == written.final()
            remote_committed = remote
    return remote_committed


def rebuilt_segments(cfg: Path, tip: TopicIdPartition, tmp: Path) -> list[RemoteLogSegmentMetadata]:
    """``rlm metadata rebuild --execute`` from the bucket into a new embedded store; its segments."""
    raw = yaml.safe_load(cfg.read_text())
    work = tmp / f"rebuilt-{len(list(tmp.glob('rebuilt-*')))}"
    doc = {"log_dirs": raw["log_dirs"], "work_dir": str(work), "storage": raw["storage"],
           "http": {"enabled": False}}
    work.mkdir(parents=True)
    path = work / "rlm.yaml"
    path.write_text(yaml.safe_dump(doc))
    res = rlm("metadata", "rebuild", "--config", str(path), "--topic", tip.topic, "--execute", "--json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return all_segments(path, tip, work / "reader")


def assert_one_chain(segs: list[RemoteLogSegmentMetadata], first: int, end: int) -> None:
    """The FINISHED segments: no replaced one left, one chain without gaps over ``[first, end]``."""
    fin = finished_of(segs)
    lineage = lineage_from_segments(fin)
    assert not judge_segments(fin, lineage).replaced
    links, gaps = chain(fin, lineage)
    assert not gaps and links[0][1] == first and links[-1][2] == end
    assert len(links) == len(fin), "every FINISHED segment is read"


def tier_once(cfg: Path) -> dict[str, int]:
    """One in-process daemon pass; the compaction metrics it counted."""
    d = Daemon(load_config(cfg), once=True).start()
    try:
        assert d.run_once() == 0
        m = d.metrics
        return {"compactions": m.total(m.compactions), "before": m.total(m.compaction_bytes_before),
                "after": m.total(m.compaction_bytes_after), "removed": m.total(m.compaction_records_removed)}
    finally:
        d.stop()


def test_remote_compaction_replaces_the_tiered_segments(
    kafka: Any, unique_topic: str, tmp_path: Path
) -> None:
    topic = unique_topic
    cfg, written, tip = setup_topic(kafka, topic, tmp_path)
    assert tier_once(cfg)["compactions"] == 0, "min.compaction.lag.ms of an hour: nothing compacted"
    before = finished_of(all_segments(cfg, tip, tmp_path / "r0"))
    assert len(before) >= 2, before
    remote_end = before[-1].end_offset + 1
    read_before = check_reads(cfg, kafka, topic, written, remote_end)

    set_topic_config(kafka.bootstrap, topic, **CLEANING)
    counted = tier_once(cfg)
    segs = all_segments(cfg, tip, tmp_path / "r1")
    assert all(m.state is S.COPY_SEGMENT_FINISHED for m in segs), [m.state for m in segs]
    new = segs[0]
    replaced = [m for m in before if m.end_offset <= new.end_offset]
    assert len(replaced) >= 2 and new.start_offset == before[0].start_offset
    assert new.end_offset == replaced[-1].end_offset
    kept_ids = {m.remote_log_segment_id for m in before[len(replaced):]}
    assert {m.remote_log_segment_id for m in segs[1:]} == kept_ids, "only the inputs were replaced"
    assert new.remote_log_segment_id not in {m.remote_log_segment_id for m in before}
    assert stored_segment_ids(tmp_path / "remote") == {m.remote_log_segment_id.id.text for m in segs}, \
        "every input's objects deleted"
    assert new.segment_size_in_bytes < sum(m.segment_size_in_bytes for m in replaced)
    assert new.segment_leader_epochs == replaced[0].segment_leader_epochs

    remote = check_reads(cfg, kafka, topic, written, remote_end)
    assert len(remote) < len(read_before), "records were removed from the remote history"
    assert counted["compactions"] == 1 and counted["removed"] > 0
    assert counted["before"] == sum(m.segment_size_in_bytes for m in replaced)
    assert counted["after"] == new.segment_size_in_bytes
    status = read_status_file(tmp_path / "work")["partitions"][f"{topic}-0"]["compaction"]
    assert status["segments_replaced"] == len(replaced) and status["end_offset"] == new.end_offset
    shown = rlm("status", "--config", str(cfg)).stdout  # exit status: the daemon is not running
    assert f"compacted {topic}-0: [0, {new.end_offset + 1}) from {len(replaced)} segments" in shown, shown

    verify(cfg, topic)
    rebuilt = rebuilt_segments(cfg, tip, tmp_path)
    assert {m.remote_log_segment_id for m in finished_of(rebuilt)} == {m.remote_log_segment_id for m in segs}
    assert_one_chain(rebuilt, 0, before[-1].end_offset)
    res = rlm("run", "--config", str(cfg), "--once", env=child_env())
    assert res.returncode == 0, res.stderr[-3000:]
    again = all_segments(cfg, tip, tmp_path / "r2")
    assert [m.remote_log_segment_id for m in again] == [m.remote_log_segment_id for m in segs], \
        "nothing more is due: the compacted history is clean"


def test_a_second_compaction_merges_the_new_segments_and_drops_expired_tombstones(
    kafka: Any, unique_topic: str, tmp_path: Path
) -> None:
    """Compacted once, then more segments tiered: the next run compacts the compacted segment with
    them (the dirty part is the new segments, past the remote cleaner checkpoint), and the
    tombstones the first compaction kept are gone once ``delete.retention.ms`` passed."""
    topic = unique_topic
    cfg, written, tip = setup_topic(kafka, topic, tmp_path)
    tier_once(cfg)  # tiered with the cleaner held back, then compacted
    set_topic_config(kafka.bootstrap, topic, **CLEANING)
    assert tier_once(cfg)["compactions"] == 1
    first = finished_of(all_segments(cfg, tip, tmp_path / "r0"))
    compacted_ms = read_status_file(tmp_path / "work")["partitions"][f"{topic}-0"]["compaction"]["last_ms"]
    deleted = {key(k) for k in range(10, 50)}  # tombstoned, never written again
    remote_end = first[-1].end_offset + 1
    kept_tombstones = [r for r in fetch(cfg, topic, 0, remote_end, "read_committed") if r[1] in deleted]
    assert kept_tombstones and all(v is None for _, _, v in kept_tombstones), "tombstones kept at first"

    hw = high_watermark(kafka.bootstrap, topic)
    for r in range(5):  # more than a segment of updates to other keys: new rolled segments
        update_keys(kafka.bootstrap, topic, range(150, KEYS), f"late{r}", written)
    pdir = kafka.log_dir / f"{topic}-0"
    wait_for("a new rolled segment", lambda: PartitionDir(pdir).segments[-1].base_offset > hw)
    # the kept tombstones' delete horizon (the first compaction's clock + delete.retention.ms) passed
    wait_for("delete horizon passed", lambda: time.time() * 1000 > compacted_ms + 1000)
    counted = tier_once(cfg)
    second = finished_of(all_segments(cfg, tip, tmp_path / "r1"))
    assert counted["compactions"] == 1
    assert second[0].start_offset == 0 and second[0].end_offset > first[-1].end_offset
    assert second[0].remote_log_segment_id not in {m.remote_log_segment_id for m in first}
    assert_one_chain(second, 0, second[-1].end_offset)
    remote = check_reads(cfg, kafka, topic, written, second[-1].end_offset + 1)
    assert not [r for r in remote if r[1] in deleted], "expired tombstones removed"
    status = read_status_file(tmp_path / "work")["partitions"][f"{topic}-0"]["compaction"]
    assert status["dirty_offset"] == second[0].end_offset + 1
