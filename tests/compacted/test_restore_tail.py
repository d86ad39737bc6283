"""``rlm restore`` of a compacted partition whose remote history holds a tail segment, into a real
broker.

A tail segment is a remote segment whose base offset is not a broker segment's: the copier copies
a cleaned, merged segment from the remote end on (tests/compacted/test_tail_segment.py). Here the
source is ``gap_at_a_segment_end``: remote ``[0, 99]`` as first written, ``[100, 299]`` the tail of
the broker-style cleaned segment ``[0, 300)`` (it starts with a gap, 100..109 removed, has gaps
inside and ends with one, 280..299 removed) and ``[300, 399]``. Restored into a new one-node
cluster's empty ``compact,delete`` partition, the broker must load the directory and serve exactly
the remote history at both isolation levels: every offset where it was (gaps kept), the same keys
and values, a fetch into a gap answered from the next offset that exists (as the broker answers on
any compacted log), the log end at the old end offset, and new records appended from there.

Why beside a real broker: the restored files are the remote objects byte for byte, named by the
remote segments' start offsets, so a tail segment becomes a local segment whose first batch is
above its base offset and whose last record is well below the next segment's base; only the
broker's own loader can say whether that is a log it accepts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer

from fetcher import RemoteFetcher
from rlm.config import load_config
from rlm.log.partition import PartitionDir
from rlm.log.records import iter_records
from tests.compacted.helpers import first_offset_from
from tests.compacted.test_compact_topic import NO_CLEANING
from tests.compacted.test_replacement import fetch
from tests.compacted.test_tail_segment import TOPIC, _batches, gap_at_a_segment_end
from tests.daemon.test_restore_broker import cli, reads, watermarks
from tests.fixtures.restore_target import restore_command, stopped_target

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.usefixtures("no_remote_compaction")]
ISOLATIONS = ("read_committed", "read_uncommitted")
END = 400  # the remote end offset + 1: the active segment of the source


def _delivered_offset(bootstrap: str) -> int:
    """The offset the restored broker gives the next record of a new producer."""
    got: list[int | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    p.produce(TOPIC, key=b"user-new", value=b"after restore", partition=0,
              on_delivery=lambda err, msg: got.append(-1 if err else msg.offset()))
    assert p.flush(30) == 0
    (offset,) = got
    assert offset is not None and offset >= 0, got
    return offset


@pytest.mark.parametrize("first", [0, 100], ids=["whole-history", "tail-segment-first"])
def test_restored_tail_segments_are_loaded_and_served_by_the_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first: int
) -> None:
    """``first``: the first restored offset; with 100 ``--local-bytes`` leaves ``[0, 99]`` remote,
    so the tail segment is the restored log's first segment and the broker's log start is its base
    offset, below its first record (110)."""
    cfg, pdir = gap_at_a_segment_end(tmp_path)
    with RemoteFetcher.from_config(load_config(cfg)) as f:
        segs = [s.metadata for s in f.plan(TOPIC, 0).segments]
    assert [(m.start_offset, m.end_offset) for m in segs] == [(0, 99), (100, 299), (300, 399)]
    local_bytes = sum(m.segment_size_in_bytes for m in segs if m.start_offset >= first)
    assert 100 not in {s.base_offset for s in PartitionDir(pdir).segments}, "[100, 299] is a tail segment"
    # the remote history: [0, 100) as first written, then what the cleaned files hold up to the end
    later = [r.offset for b in _batches(pdir) for _, r in iter_records(b) if 100 <= r.offset < END]
    assert later[0] == 110 and max(o for o in later if o < 300) == 279
    remote = {iso: fetch(cfg, TOPIC, 0, END, iso) for iso in ISOLATIONS}
    for iso in ISOLATIONS:
        assert [o for o, _, _ in remote[iso]] == list(range(100)) + later, iso
    restored = {iso: [r for r in rows if r[0] >= first] for iso, rows in remote.items()}

    with stopped_target("restore-tail", TOPIC, **{"cleanup.policy": "compact,delete", **NO_CLEANING}) as b:
        restore = [*restore_command(cfg, TOPIC, b), "--local-bytes", str(local_bytes), "--execute"]
        (part,) = cli(capsys, *restore)["partitions"]
        assert part["skipped"] is None, part
        assert (part["first_offset"], part["log_start"], part["next_offset"]) == (first, first, END)
        target = b.log_dir / f"{TOPIC}-0"
        bases = [o for o in (0, 100, 300, END) if o >= first]
        assert sorted(p.name for p in target.glob("*.log")) == [f"{o:020d}.log" for o in bases]
        b.start_node(1)

        assert watermarks(b.bootstrap, TOPIC) == (first, END), "log start and end as restored"
        served = reads(b.bootstrap, TOPIC, OFFSET_BEGINNING, END)
        for iso in ISOLATIONS:
            assert [(o, k, v) for o, k, v, _ts, _h in served[iso]] == restored[iso], iso
        # fetches into the gaps of the tail segment: at its start, inside it, at its end
        assert first_offset_from(b.bootstrap, TOPIC, 100) == 110
        assert first_offset_from(b.bootstrap, TOPIC, 285) == 300
        inside = next(o for o in range(111, 280) if o not in set(later))
        assert first_offset_from(b.bootstrap, TOPIC, inside) == min(o for o in later if o > inside)
        assert _delivered_offset(b.bootstrap) == END, "new records continue at the old end offset"
