"""A compacted topic's copy indexes, with a segment's data, the aborts whose ABORT marker is still in
a later local segment (rlm.daemon.aborts_ahead): the entries read from the later ``.txnindex``
files as Kafka's search walks them, the remote index they make, and what a read_committed fetch
lists when the same abort is then found in two remote segments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fetcher import RemoteFetcher
from rlm.daemon import clock
from rlm.daemon.aborts_ahead import aborts_ahead, remote_txn_index, with_aborts_ahead
from rlm.daemon.compacted import SegmentRewrittenError
from rlm.lineage import finished_only
from rlm.log.partition import PartitionDir
from rlm.log.records import iter_batches
from rlm.log.txn_index import AbortedTxn, encode_txn_index, parse_txn_index, read_txn_index
from rlm.types import IndexType
from tests.compacted.property_world import (
    TOPIC,
    Broker,
    Sidecar,
    daemon_config,
    data_tiered_ahead_of_its_abort,
    read_from_zero,
)
from tests.compacted.test_property_replacement import shifted_clock  # noqa: F401  (a fixture)


def _index(directory: Path, base: int, entries: list[AbortedTxn]) -> Path:
    path = directory / f"{base:020d}.txnindex"
    path.write_bytes(encode_txn_index(entries))
    return path


OWN = AbortedTxn(1, 0, 3, 4)  # the copied segment's own abort: data and marker in [0, 10)
B = AbortedTxn(2, 5, 12, 6)  # data in [0, 10), marker in the next segment
C = AbortedTxn(3, 11, 14, 8)  # begun after the copied segment: not its business (D open: LSO 8)
D = AbortedTxn(4, 8, 21, 9)
E = AbortedTxn(6, 9, 25, 26)  # its LSO reaches 10: nothing begun below 10 is open after it


def test_aborts_ahead_walks_later_indexes_as_kafka_searches(tmp_path: Path) -> None:
    """The segment [0, 10): the aborts begun below 10 with a marker at or above it, from the later
    indexes in marker order; the walk stops at the first entry whose LSO reaches 10 (the index of
    the segment at 30 is damaged: it is never read), and files not named as the broker's live
    indexes (``.deleted``) are left alone."""
    _index(tmp_path, 0, [OWN])
    _index(tmp_path, 10, [B, C])
    _index(tmp_path, 20, [D, E])
    (tmp_path / f"{30:020d}.txnindex").write_bytes(b"damaged")
    (tmp_path / f"{10:020d}.txnindex.deleted").write_bytes(b"damaged")
    assert aborts_ahead(tmp_path, 10) == [B, D, E]
    assert aborts_ahead(tmp_path, 40) == []


def test_aborts_ahead_refuses_while_the_cleaner_swaps(tmp_path: Path) -> None:
    """Between deleting the old segments and renaming the ``.swap`` ones the entries are nowhere:
    the copy is retried (retriable error), never made without them."""
    _index(tmp_path, 10, [B])
    (tmp_path / f"{10:020d}.log.swap").write_bytes(b"")
    with pytest.raises(SegmentRewrittenError) as e:
        aborts_ahead(tmp_path, 10)
    assert e.value.retriable


def test_index_keeps_marker_order_without_duplicates() -> None:
    """Own entries first, then those ahead whose marker is above them, each once: the order
    Kafka's ``TransactionIndex.append`` requires."""
    assert with_aborts_ahead([OWN], [B, D, E]) == [OWN, B, D, E]
    assert with_aborts_ahead([OWN, B], [B, E]) == [OWN, B, E]
    assert with_aborts_ahead([], []) == []


def test_remote_txn_index_is_the_brokers_file_unless_something_is_ahead(tmp_path: Path) -> None:
    local, staging = tmp_path / "local", tmp_path / "staging"
    local.mkdir()
    staging.mkdir()
    own = _index(local, 0, [OWN])
    staged = staging / own.name
    assert remote_txn_index(own, 0, 0, [], staged) == own, "the broker's file, not a byte changed"
    assert not staged.exists()
    assert remote_txn_index(own, 0, 0, [B, E], staged) == staged
    # Kafka's sanityCheck (last offset >= the base) and increasing markers: the parser checks both
    assert parse_txn_index(staged.read_bytes(), base_offset=0) == [OWN, B, E]
    tail = staging / f"{4:020d}.txnindex"  # a tail copied from 4: the own abort's marker (3) is below
    assert remote_txn_index(own, 0, 4, [B], tail) == tail
    assert read_txn_index(tail) == [B]
    assert remote_txn_index(own, 0, 4, [], staging / "none.txnindex") is None
    assert remote_txn_index(local / f"{50:020d}.txnindex", 50, 50, [], staged) is None, "no file, no abort"


def test_abort_in_two_remote_indexes_is_listed_once(tmp_path: Path) -> None:
    """A long transaction open across a short one's ABORT keeps that entry's LSO below the segment
    end, and the long one commits (no entry): the copied segment's index names the short abort
    without completing the search, so a read from offset 0 walks on into the marker's segment,
    which names it again. The FetchResponse lists it once (Kafka's remote read collects a set) and
    read_committed shows only the committed records."""
    broker = Broker(tmp_path / "logs", tmp_path / "scratch", {"cleanup.policy": "compact,delete"})
    config = daemon_config(tmp_path, "compact,delete")
    sidecar = Sidecar(config, broker)
    try:
        broker.append([(b"k0", b"long")], producer_id=3, transactional=True)  # 0
        broker.append([(b"k1", b"short")], producer_id=2, transactional=True)  # 1
        broker.roll()
        broker.end_transaction(2, commit=False)  # 2: the LSO after it is 0 (the long one is open)
        broker.end_transaction(3, commit=True)  # 3
        broker.roll()
        assert sidecar.tier() == 2
        first, marker = sorted(finished_only(sidecar.segments()), key=lambda m: m.start_offset)
        with sidecar.ctx.rsm.fetch_index(first, IndexType.TRANSACTION) as s:
            ahead = parse_txn_index(s.read(), base_offset=0)
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in ahead] == [(2, 1, 2)]
        assert not first.txn_index_empty and not marker.txn_index_empty
        with RemoteFetcher.from_config(config, load_all=False) as f:
            got = f.fetch(TOPIC, 0, 0, isolation="read_committed")
        assert [(a.producer_id, a.first_offset) for a in got.aborted_transactions or ()] == [(2, 1)]
        rows, end = read_from_zero(config, broker, "read_committed")
        assert end == 4 and [o for o, _, _ in rows] == [0]
    finally:
        sidecar.close()


@pytest.mark.usefixtures("shifted_clock")
def test_marker_dropped_before_tiering_ends_the_abort_at_its_last_offset(tmp_path: Path) -> None:
    """``delete.retention.ms=0``: the broker's cleaner removes the aborted data, then the ABORT
    marker itself, before the marker's segment is tiered; the same producer then committed a
    transaction. The remote history holds the aborted data with its entry (indexed ahead) and no
    marker. Remote compaction (Kafka's cleaner rules) took the producer's later committed batch
    for aborted data too and removed it, the key's only value, until the walk ended an aborted
    transaction at its entry's last offset (rlm.compaction.transactions)."""
    configs = {"cleanup.policy": "compact,delete", "delete.retention.ms": "0",
               "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
               "max.compaction.lag.ms": "1800000"}
    broker = Broker(tmp_path / "logs", tmp_path / "scratch", configs)
    config = daemon_config(tmp_path, "compact,delete")
    sidecar = Sidecar(config, broker)
    try:
        data_tiered_ahead_of_its_abort(broker, sidecar, 2)
        for shift in (0, 10, 20):  # data, then the marker's delete horizon stamped, then passed
            clock.set_offset_ms(shift)
            assert broker.clean()
        local = [h.base_offset for s in PartitionDir(broker.pdir).segments for h in iter_batches(s.log_path)]
        assert local == [2, 3], "the aborted data and its ABORT marker are gone locally"
        sidecar.tier()
        broker.append([(b"k9", b"filler")], producer_id=1)  # 4
        broker.roll()
        sidecar.tier()
        clock.set_offset_ms(3_600_000)  # past max.compaction.lag.ms
        assert sidecar.compact() == 3
        rows, end = read_from_zero(config, broker, "read_committed")
        assert end == 5 and rows == [(2, b"k1", b"committed"), (4, b"k9", b"filler")]
    finally:
        sidecar.close()
