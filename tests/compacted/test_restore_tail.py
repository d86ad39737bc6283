"""``rlm restore`` of a compacted partition whose remote history holds a tail segment, into a real
broker.

A tail segment is a remote segment whose base offset is not a broker segment's: the copier copies
a cleaned, merged segment from the remote end on (tests/compacted/test_tail_segment.py). One
history is made by the session broker's own cleaner (a tail of whatever it kept); two are built on
files as the broker's cleaner leaves them and tiered by the daemon, for the shapes a broker run
does not promise:

* ``gap_at_a_segment_end``: remote ``[0, 99]`` as first written, ``[100, 299]`` the tail of the
  cleaned segment ``[0, 300)`` (it starts with a gap, 100..109 removed, has gaps inside and ends
  with one, 280..299 removed), then ``[300, 399]``;
* :func:`empty_tail_at_the_end`: remote ``[0, 99]``, ``[100, 199]`` as written, then ``[200, 299]``
  the tail of a cleaned segment whose batches from 200 on the cleaner all removed: a segment of
  0 bytes, the last of the history.

A fourth history is not a tail: segments the remote compaction job replaced with one compacted
segment, restored the same way.

Restored into a new one-node cluster's empty ``compact,delete`` partition, the broker must load the
directory and serve exactly the remote history at both isolation levels (every offset where it
was, gaps kept, the same keys and values, as ``rlm fetch`` reads it), with the log start and end
as restored, answer a fetch into a gap from the next offset that exists (as it answers on any
compacted log) and append new records at the old end offset. A log restored up to an empty tail
ends in a gap (``[200, 300)``): a consumer there gets nothing and keeps its position until a new
record arrives, as on any broker log whose last offsets are gone, so the reads start after one.

Why beside a real broker: the restored files are the remote objects byte for byte, named by the
remote segments' start offsets, so a tail segment becomes a local segment whose first batch is
above its base offset, whose last record is well below the next segment's base, or which holds no
batch at all; only the broker's own loader can say whether that is a log it accepts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import OFFSET_BEGINNING, Producer

from fetcher import RemoteFetcher
from rlm.config import load_config
from rlm.log.checkpoints import CLEANER_OFFSET_CHECKPOINT
from rlm.log.partition import PartitionDir
from rlm.log.records import iter_records
from rlm.log.writer import PartitionWriter, merge_offset_checkpoint
from rlm.types import KafkaUuid, RemoteLogSegmentMetadata, TopicPartition
from tests.compacted.helpers import (
    Row,
    checkpoint,
    first_offset_from,
    set_topic_config,
    update_keys,
    wait_cleaned_past,
    write_workload,
)
from tests.compacted.swapping_rsm import swap_in
from tests.compacted.test_compact_topic import CLEANING, COMPACT, NO_CLEANING, _raw_config, _roll, _tier_once
from tests.compacted.test_replacement import fetch, setup_topic, tier_once
from tests.compacted.test_tail_segment import (
    TOPIC,
    _batches,
    _config,
    _kept,
    _original,
    _tier,
    gap_at_a_segment_end,
)
from tests.daemon.helpers import create_topic
from tests.daemon.test_restore_broker import cli, reads, watermarks
from tests.fixtures.restore_target import restore_command, stopped_target
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ISOLATIONS = ("read_committed", "read_uncommitted")


def empty_tail_at_the_end(tmp: Path) -> Path:
    """The config of the second history of the module docstring; the source's active segment is
    at 300."""
    tid = KafkaUuid.random()
    pdir = _original(tmp / "logs", tid)  # segments 0, 100, 200 and the active one at 300
    held = tmp / "held"
    held.mkdir()
    for f in pdir.glob(f"{300:020d}.*"):
        f.rename(held / f.name)
    cfg = tmp / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(_config(tmp)))
    _tier(cfg)  # [0, 200): the segment at 200 is the active one
    for f in held.iterdir():
        f.rename(pdir / f.name)
    cleaned = tmp / "cleaned" / pdir.name
    w = PartitionWriter(cleaned, topic_id=tid)
    for i, b in enumerate(_batches(pdir)[:20]):  # nothing of 200..299 kept
        if _kept(i):
            w.append_at_own_offsets(b)
    w.close(clean=False)
    for f in pdir.glob(f"{300:020d}.*"):
        (cleaned / f.name).write_bytes(f.read_bytes())  # the active segment, unchanged
    swap_in(cleaned, pdir)
    merge_offset_checkpoint(pdir.parent / CLEANER_OFFSET_CHECKPOINT, {TopicPartition(TOPIC, 0): 300})
    _tier(cfg)
    return cfg


def remote_segments(cfg: Path, topic: str = TOPIC) -> list[RemoteLogSegmentMetadata]:
    with RemoteFetcher.from_config(load_config(cfg)) as f:
        return [s.metadata for s in f.plan(topic, 0).segments]


def delivered_offset(bootstrap: str, topic: str) -> int:
    """The offset the restored broker gives the next record of a new producer."""
    got: list[int | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    p.produce(topic, key=b"user-new", value=b"after restore", partition=0,
              on_delivery=lambda err, msg: got.append(-1 if err else msg.offset()))
    assert p.flush(30) == 0
    (offset,) = got
    assert offset is not None and offset >= 0, got
    return offset


@contextmanager
def restored(cfg: Path, name: str, first: int, capsys: pytest.CaptureFixture[str], topic: str = TOPIC
             ) -> Iterator[tuple[KafkaCluster, dict[str, list[Row]]]]:
    """B holding the remote history of ``topic`` restored from offset ``first`` on, started, after
    the checks every history shares (module docstring); yields B and the remote rows ``rlm fetch``
    reads from 0, per isolation level."""
    segs = remote_segments(cfg, topic)
    end = segs[-1].end_offset + 1
    remote = {iso: fetch(cfg, topic, 0, end, iso) for iso in ISOLATIONS}
    local_bytes = sum(m.segment_size_in_bytes for m in segs if m.start_offset >= first)
    with stopped_target(name, topic, **{"cleanup.policy": "compact,delete", **NO_CLEANING}) as b:
        restore = [*restore_command(cfg, topic, b), "--local-bytes", str(max(local_bytes, 1)), "--execute"]
        (part,) = cli(capsys, *restore)["partitions"]
        assert part["skipped"] is None, part
        assert (part["first_offset"], part["log_start"], part["next_offset"]) == (first, first, end)
        target = b.log_dir / f"{topic}-0"
        bases = [m.start_offset for m in segs if m.start_offset >= first] + [end]
        assert sorted(p.name for p in target.glob("*.log")) == [f"{o:020d}.log" for o in bases]
        # a transaction whose records were tiered but whose marker was still local at the remote
        # end is open in the restored log: restore aborts it with one ABORT marker at the old end
        # (rlm.recovery.open_txns); whether the workload leaves one there depends on its timing
        opened = part["aborted_transactions"]
        log_end = end + len(opened)
        b.start_node(1)

        assert watermarks(b.bootstrap, topic) == (first, log_end), "log start and end as restored"
        # a new record first: a log ending in a gap (the empty tail) gives a consumer nothing to move
        # its position past the last record until one arrives, on this broker as on any other
        assert delivered_offset(b.bootstrap, topic) == log_end, "new records continue after the restored end"
        served = reads(b.bootstrap, topic, OFFSET_BEGINNING, log_end)
        for iso in ISOLATIONS:
            want = [r for r in remote[iso] if r[0] >= first]
            got = [(o, k, v) for o, k, v, _ts, _h in served[iso]]
            if iso == "read_committed" and opened:
                # the aborted open transactions' records are hidden from their first offset on
                since = min(a["first_offset"] for a in opened)
                assert [r for r in got if r[0] < since] == [r for r in want if r[0] < since], iso
                assert set(got) <= set(want), iso
            else:
                assert got == want, iso
        yield b, remote


@pytest.mark.usefixtures("no_remote_compaction")  # it would replace the tiered segments
@pytest.mark.parametrize("first", [0, 100], ids=["whole-history", "tail-segment-first"])
def test_restored_tail_segment_with_gaps_is_loaded_and_served_by_the_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first: int
) -> None:
    """``first``: the first restored offset; with 100 ``--local-bytes`` leaves ``[0, 99]`` remote,
    so the tail segment is the restored log's first segment and the broker's log start is its base
    offset, below its first record (110)."""
    cfg, pdir = gap_at_a_segment_end(tmp_path)
    segs = remote_segments(cfg)
    assert [(m.start_offset, m.end_offset) for m in segs] == [(0, 99), (100, 299), (300, 399)]
    assert 100 not in {s.base_offset for s in PartitionDir(pdir).segments}, "[100, 299] is a tail segment"
    # the remote history: [0, 100) as first written, then what the cleaned files hold up to the end
    later = [r.offset for b in _batches(pdir) for _, r in iter_records(b) if 100 <= r.offset < 400]
    assert later[0] == 110 and max(o for o in later if o < 300) == 279

    with restored(cfg, "restore-tail", first, capsys) as (b, remote):
        for iso in ISOLATIONS:
            assert [o for o, _, _ in remote[iso]] == list(range(100)) + later, iso
        # fetches into the gaps of the tail segment: at its start, inside it, at its end
        assert first_offset_from(b.bootstrap, TOPIC, 100) == 110
        assert first_offset_from(b.bootstrap, TOPIC, 285) == 300
        inside = next(o for o in range(111, 280) if o not in set(later))
        assert first_offset_from(b.bootstrap, TOPIC, inside) == min(o for o in later if o > inside)


@pytest.mark.usefixtures("no_remote_compaction")
def test_restored_empty_tail_segment_is_loaded_and_served_by_the_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = empty_tail_at_the_end(tmp_path)
    segs = remote_segments(cfg)
    assert [(m.start_offset, m.end_offset) for m in segs] == [(0, 99), (100, 199), (200, 299)]
    assert segs[-1].segment_size_in_bytes == 0, "the cleaner removed every batch of the tail"

    with restored(cfg, "restore-empty-tail", 0, capsys) as (b, remote):
        for iso in ISOLATIONS:
            assert [o for o, _, _ in remote[iso]] == list(range(200)), iso
        assert (b.log_dir / f"{TOPIC}-0" / f"{200:020d}.log").stat().st_size == 0
        assert first_offset_from(b.bootstrap, TOPIC, 250) == 300, "a fetch in the empty segment"


@pytest.mark.usefixtures("no_remote_compaction")
def test_restored_tail_segment_made_by_the_brokers_cleaner(
    kafka: Any, unique_topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The session broker's own cleaner makes the tail: a ``compact`` topic with the keyed workload
    (tombstones, a committed and an aborted transaction) is tiered up to the cleaner's checkpoint,
    small dirty segments wait above it, then ``segment.bytes`` is raised so that the cleaner's next
    pass groups every segment below the active one into one (Kafka groups segments up to
    ``segment.bytes``) and the copier copies that segment's tail from the remote end."""
    topic, bs = unique_topic, kafka.bootstrap
    pdir = kafka.log_dir / f"{topic}-0"
    create_topic(bs, topic, 1, 1, **COMPACT, **CLEANING)
    written = write_workload(bs, topic)
    wait_cleaned_past(kafka.log_dir, topic, 0)
    set_topic_config(bs, topic, **NO_CLEANING, **{"segment.ms": "100"})
    for r in range(3):
        update_keys(bs, topic, range(0, 100), f"late{r}", written)
        _roll(bs, topic, pdir, written)
    set_topic_config(bs, topic, **{"segment.ms": "604800000"})
    remote_end = checkpoint(kafka.log_dir, topic)
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(_raw_config(kafka, topic, tmp_path)))
    _tier_once(cfg)
    assert remote_segments(cfg, topic)[-1].end_offset + 1 == remote_end == checkpoint(kafka.log_dir, topic)

    set_topic_config(bs, topic, **CLEANING, **{"segment.bytes": str(64 << 20)})
    wait_cleaned_past(kafka.log_dir, topic, remote_end)
    local = PartitionDir(pdir)
    assert [s for s in local.inactive_segments()
            if s.base_offset < remote_end < local.next_offset(s)], "one cleaned segment across the remote end"
    _tier_once(cfg)
    segs = remote_segments(cfg, topic)
    assert remote_end in {m.start_offset for m in segs}, "the tail copied from the remote end"
    assert remote_end not in {s.base_offset for s in PartitionDir(pdir).segments}, "a tail segment"

    with restored(cfg, "restore-cleaner-tail", 0, capsys, topic) as (_b, remote):
        for iso, rows in remote.items():
            assert all(written.records[o] == (k, v) for o, k, v in rows), f"{iso}: as written"
            assert len(rows) < segs[-1].end_offset + 1, f"{iso}: the cleaner's gaps"
        assert not {o for o, _, _ in remote["read_committed"]} & written.aborted


def test_restored_remotely_compacted_history(
    kafka: Any, unique_topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a tail: a ``compact,delete`` topic whose tiered segments the remote compaction job
    replaced with one compacted segment (gaps, the aborted transaction and markers removed, the
    last input's producer snapshot) restores the same way."""
    topic = unique_topic
    cfg, written, _tip = setup_topic(kafka, topic, tmp_path)
    assert tier_once(cfg)["compactions"] == 0
    tiered = remote_segments(cfg, topic)
    set_topic_config(kafka.bootstrap, topic, **CLEANING)
    assert tier_once(cfg)["compactions"] == 1
    segs = remote_segments(cfg, topic)
    assert segs[0].remote_log_segment_id not in {m.remote_log_segment_id for m in tiered}

    with restored(cfg, "restore-compacted", 0, capsys, topic) as (_b, remote):
        for iso, rows in remote.items():
            assert all(written.records[o] == (k, v) for o, k, v in rows), f"{iso}: as written"
            assert len(rows) < segs[-1].end_offset + 1, f"{iso}: the compaction's gaps"
        assert not {o for o, _, _ in remote["read_committed"]} & written.aborted
