"""A ``cleanup.policy=compact`` topic beside a real broker whose own log cleaner runs.

The daemon tiers only what the cleaner has finished with (segments wholly below the
``cleaner-offset-checkpoint`` entry), the remote copy of a cleaned segment serves a fetch into a
gap the way the broker does (the next offset that exists), a later cleaner pass that rewrites
and merges the tiered segments changes nothing remotely, the next copy starts at the remote end
(the merged segment straddling it is copied from there on), and ``rlm verify --deep`` stays clean.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.model import Record
from rlm.log.partition import PartitionDir
from rlm.log.records import iter_records
from rlm.plugin_setup import load_rlmm, load_rsm
from rlm.types import TopicIdPartition
from tests.compacted.helpers import (
    KEYS,
    final_of,
    first_offset_from,
    high_watermark,
    read_from,
    set_topic_config,
    tree_digest,
    update_keys,
    wait_cleaned_past,
    write_workload,
)
from tests.daemon.helpers import check_segment_against_local, create_topic, finished, topic_rlmm, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.usefixtures("no_remote_compaction")]
ROOT = Path(__file__).resolve().parents[2]
NO_CLEANING = {"min.compaction.lag.ms": "3600000"}  # new data not cleanable for an hour
CLEANING = {"min.compaction.lag.ms": "0"}
COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"}


def _raw_config(kafka: Any, topic: str, tmp: Path) -> dict[str, Any]:
    return {
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(tmp / "work"),
        "bootstrap_servers": kafka.bootstrap,
        "storage": {"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
        "metadata": topic_rlmm(kafka.bootstrap, tmp / "work"),
        "topics": [{"pattern": topic, "remote.storage.enable": True}],
        "task_interval_ms": 200,
        "http": {"enabled": False},
    }


def _tier_once(cfg_path: Path) -> None:
    d = Daemon(load_config(cfg_path), once=True).start()
    try:
        assert d.run_once() == 0
    finally:
        d.stop()


def _remote(cfg_path: Path, topic: str, kafka: Any) -> list[Any]:
    cfg = load_config(cfg_path)
    pdir = PartitionDir(kafka.log_dir / f"{topic}-0")
    tp = TopicIdPartition(pdir.topic_id, topic, 0)
    rlmm = load_rlmm(cfg, 0, read_only=True)
    try:
        rlmm.on_partition_leadership_changes({tp}, set())
        return finished(rlmm, tp)
    finally:
        rlmm.close()


def _roll(bootstrap: str, topic: str, pdir: Path, written: Any) -> None:
    """Rolls the active segment (segment.ms is short): one more record until the broker has."""
    n = len(PartitionDir(pdir).segments)

    def rolled() -> bool:
        update_keys(bootstrap, topic, range(KEYS - 1, KEYS), "roll", written)
        return len(PartitionDir(pdir).segments) > n

    wait_for("segment rolled", rolled)


def _first_data_offset(records: bytes, at: int) -> int | None:
    offsets = (r.offset for _, r in iter_records(records) if isinstance(r, Record))
    return next((o for o in offsets if o >= at), None)


def test_compact_topic_tiered_below_the_cleaner_checkpoint(
    kafka: Any, unique_topic: str, tmp_path: Path
) -> None:
    topic, bs = unique_topic, kafka.bootstrap
    create_topic(bs, topic, **COMPACT, **CLEANING)
    written = write_workload(bs, topic)
    pdir_path = kafka.log_dir / f"{topic}-0"
    wait_cleaned_past(kafka.log_dir, topic, 0)
    # small dirty segments above the checkpoint: rolled, below the LSO, and still not eligible
    set_topic_config(bs, topic, **NO_CLEANING, **{"segment.ms": "100"})
    for r in range(3):
        update_keys(bs, topic, range(0, 100), f"late{r}", written)
        _roll(bs, topic, pdir_path, written)
    set_topic_config(bs, topic, **{"segment.ms": "604800000"})
    checkpoint = wait_cleaned_past(kafka.log_dir, topic, 0)
    pdir = PartitionDir(pdir_path)
    assert any(s.base_offset >= checkpoint for s in pdir.inactive_segments()), "a dirty rolled segment"

    cfg_path = tmp_path / "rlm.yaml"
    cfg_path.write_text(yaml.safe_dump(_raw_config(kafka, topic, tmp_path)))
    _tier_once(cfg_path)
    segs = _remote(cfg_path, topic, kafka)
    assert wait_cleaned_past(kafka.log_dir, topic, 0) == checkpoint, "no cleaner pass meanwhile"
    assert segs, "the cleaned segments are tiered"
    assert segs[-1].end_offset + 1 == checkpoint, "tiered up to the checkpoint, no further"
    cfg = load_config(cfg_path)
    rsm = load_rsm(cfg, 0)
    try:
        for md in segs:  # exact copies of the cleaned segments
            check_segment_against_local(rsm, md, PartitionDir(pdir_path))
    finally:
        rsm.close()

    # a fetch into a gap left by the cleaner is served from the next offset, as the broker does
    kept = {o for o, _, _ in read_from(bs, topic, 0, "read_uncommitted", high_watermark(bs, topic))}
    gaps = [o for o in range(segs[0].start_offset, checkpoint) if o not in kept]
    assert len(gaps) > 100, "the cleaner left gaps in the tiered range"
    probes = gaps[:: max(1, len(gaps) // 12)]
    fetcher = RemoteFetcher.from_config(cfg)
    try:
        with EndpointThread(fetcher, ListenerSettings(port=0, merged=False), tmp_path / "ep") as ep:
            for g in probes:
                want = first_offset_from(bs, topic, g)
                if want >= checkpoint:
                    continue  # the rest of the gap is above the remote end: the broker's part
                got = fetcher.fetch(topic, 0, g)
                assert _first_data_offset(got.records, g) == want, g
                assert first_offset_from(ep.bootstrap, topic, g) == want, g
    finally:
        fetcher.close()

    # the cleaner rewrites the tiered segments and merges them with the small dirty ones above the
    # remote end (the late updates supersede records in them): nothing changes remotely
    before = tree_digest(tmp_path / "remote")
    first_local = segs[0].start_offset
    local_before = (pdir_path / f"{first_local:020d}.log").read_bytes()
    set_topic_config(bs, topic, **CLEANING)
    second = wait_cleaned_past(kafka.log_dir, topic, checkpoint)
    assert tree_digest(tmp_path / "remote") == before
    pdir = PartitionDir(pdir_path)
    assert (pdir_path / f"{first_local:020d}.log").read_bytes() != local_before, "the cleaner rewrote it"
    # whether the cleaner merged tiered and untiered offsets into one segment is its own choice (by
    # sizes); test_tail_segment.py covers that case on written files
    straddling = [s for s in pdir.inactive_segments() if s.base_offset < checkpoint < pdir.next_offset(s)]

    _tier_once(cfg_path)
    after = tree_digest(tmp_path / "remote")
    assert {k: after[k] for k in before} == before, "no remote object changed"
    segs2 = _remote(cfg_path, topic, kafka)
    assert segs2[: len(segs)] == segs
    for prev, nxt in itertools.pairwise(segs2):
        assert nxt.start_offset == prev.end_offset + 1, "never a range copied twice, never a hole"
    assert segs2[len(segs)].start_offset == checkpoint, "copied from the remote end on"
    if straddling:
        assert segs2[len(segs)].end_offset + 1 == pdir.next_offset(straddling[0])
    assert segs2[-1].end_offset + 1 <= second

    # readers: remote history + the broker's part end with the broker's value for every key
    fetcher = RemoteFetcher.from_config(load_config(cfg_path))
    try:
        with EndpointThread(fetcher, ListenerSettings(port=0, merged=True), tmp_path / "merged") as ep:
            rows = read_from(ep.bootstrap, topic, 0, "read_committed", high_watermark(bs, topic))
    finally:
        fetcher.close()
    assert all(written.records[o] == (k, v) for o, k, v in rows), "offsets and contents preserved"
    assert not {o for o, _, _ in rows} & written.aborted
    assert final_of(rows) == written.final()

    res = subprocess.run([sys.executable, "-m", "rlm.cli", "verify", "--config", str(cfg_path), "--deep",
                          "--topic", topic], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
