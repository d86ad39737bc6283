"""Fixtures shared by the fault modules: one three-node KRaft cluster for every cluster test.

Why package scope: a three-node cluster costs about a minute to start; the cluster-fault tests
(``test_cluster_faults.py``) and the leadership-history tests (``test_cluster_history.py``) each
create their own topics and metadata topics on it, and restart any node they stop.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services.kafka import KafkaCluster
from tests.services.proc import kill


@pytest.fixture(scope="package")
def cluster3() -> Iterator[KafkaCluster]:
    c = KafkaCluster(nodes=3, name="kafka3-faults").start()
    try:
        yield c
    finally:
        # its data is thrown away: no controlled shutdown (the last node's waits for a quorum
        # that is gone, until the 30 s grace ends)
        for n in c.node_ids:
            proc = c.node(n).proc
            if proc is not None:
                kill(proc)
                c.node(n).proc = None
        c.stop()
