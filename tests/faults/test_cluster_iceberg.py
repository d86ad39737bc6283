"""Issue 24 on three real KRaft nodes: after an unclean leader election, the Iceberg table of the
topic holds the new leader's lineage only.

The scenario is ``test_cluster_history.py``'s unclean election (replicas A and C, min.insync 1):
C stops; A acknowledges and tiers a tail alone; A stops; C is elected uncleanly and writes other
records at the tail's offsets, and tiers them. A's tail segments stay COPY_SEGMENT_FINISHED in the
metadata (quarantined for the grace period), one of them overlapping records both leaders share.
``rlm iceberg``'s writer (in process, reading through the read core as C's node would) must then
build a table equal to what the broker's read_committed consumer reads from C, with none of the
lost tail's records and none of A's diverged segments in its ledger.

Not marked ``faults`` (the reliability doc's rows come from a full fault-suite run); it runs with
the cluster tests because it needs their three-node cluster fixture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from fetcher import RemoteFetcher
from rlm.config import IcebergConfig, load_config
from rlm.log.partition import PartitionDir
from rlm.types import RemoteLogSegmentState, TopicIdPartition
from tests.daemon.helpers import wait_for
from tests.faults.cluster_helpers import tiered_past, unclean_failover
from tests.faults.proc_helpers import rolled_end
from tests.faults.test_cluster_history import (
    HOUR_MS,
    Sidecars,
    create_tiered_topic,
    produce_acked,
    segment_ids,
)
from tests.iceberg.test_iceberg import consumed, table_rows
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.slow]
A, C = 1, 3
FIN = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def test_iceberg_table_after_an_unclean_election_holds_only_the_lineage(
    cluster3: KafkaCluster, tmp_path: Path
) -> None:
    """A real diverged epoch: the table equals C's read_committed read, A's lost tail is absent."""
    from rlm.tables import IcebergSync, read_ledger

    c, topic = cluster3, "ice-unclean"
    bs = c.bootstrap
    create_tiered_topic(
        c, topic, [A, C], **{"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    )
    pdir_a, pdir_c = (c.node(n).log_dir / f"{topic}-0" for n in (A, C))
    tip = TopicIdPartition(PartitionDir(pdir_a).topic_id, topic, 0)
    cars = Sidecars(c, tmp_path, topic, off_lineage_grace_ms=HOUR_MS)  # A's tail stays FINISHED
    reader = load_config(None, **cars.settings(C, tmp_path / "reader"))
    (tmp_path / "wh").mkdir()
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
               "warehouse": (tmp_path / "wh").as_uri()}
    result: dict[str, Any] = {"catalog_name": "rlm", "catalog": catalog}
    try:
        a, c_car = cars.start_inproc(A), cars.start_inproc(C)
        shared = produce_acked(bs, topic, 1500, "shared")  # one rolled segment, the rest active
        wait_for("A tiered the shared records", lambda: cars.tiered_to(A, rolled_end(pdir_a)), timeout=120)
        c.stop_node(C)
        tail = produce_acked(bs, topic, 1500, "tail")  # acknowledged by A alone
        tail_end = rolled_end(pdir_a)
        wait_for("A tiered the tail", lambda: cars.tiered_to(A, tail_end), timeout=120)
        lost = set(tiered_past(a, tip, A, max(shared)))
        assert lost, "A tiered the tail"
        unclean_failover(c, topic, A, cars.daemons.pop(A), C)
        produce_acked(bs, topic, 2000, "c")  # other records at the tail's offsets
        c_end = rolled_end(pdir_c)
        assert c_end > max(tail)
        wait_for("C tiered its log", lambda: cars.tiered_to(C, c_end), timeout=120)
        states = segment_ids(c_car, tip)
        assert all(states.get(s) is FIN for s in lost), "the diverged copies are still FINISHED"
        with RemoteFetcher.from_config(reader) as f:
            wait_for("the reader's metadata reaches C's tiered end",
                     lambda: int(f.plan(topic, 0).log_end) > c_end, timeout=120)
            plan = f.plan(topic, 0)
            lineage = {link.metadata.remote_log_segment_id.id.text for link in plan.segments}
            assert not lineage & lost
            cfg = IcebergConfig.model_validate({"catalog": catalog})
            sync = IcebergSync(f, load_catalog("rlm", **catalog), cfg, topic)
            run = sync.run_once()
            ledger = read_ledger(sync.table)
            result["table"] = sync.identifier
        truth = consumed(bs, topic, int(plan.log_end))  # read_committed, from C
    finally:
        cars.stop_all()
        for n in (A, C):
            if c.node(n).proc is None:
                c.start_node(n)
    assert run.added_segments == len(lineage) and set(ledger.segments) == lineage
    rows, segs = table_rows(result)
    assert set(segs) == lineage
    assert [r[0] for r in rows] == list(range(int(plan.log_end)))  # no gap where A's copy was left out
    assert rows == truth
    tail_keys = {k for k, _ in tail.values()}
    assert not tail_keys & {r[3] for r in rows}, "a lost-tail record reached the table"
