"""The read side: one read core of tiered partitions (Kafka's remote fetcher pool) and its serving faces.

One core (:class:`RemoteFetcher`) answers which segments hold an offset on the current epoch
lineage (:mod:`fetcher.planning`), where to start and stop (remote index cache, offset and
time indexes), and how bytes become records (:mod:`fetcher.fetch`, :mod:`fetcher.scan`); the
CLI, the HTTP API, the Kafka-protocol endpoint and the Spark source are faces of it.
"""

from typing import TYPE_CHECKING

from rlm import lazy_names

if TYPE_CHECKING:
    from fetcher.core import OffsetAnswer, RemoteFetcher
    from fetcher.fetch import AbortedTransaction, FetchResult
    from fetcher.frontier import Frontier, FrontierSource
    from fetcher.isolation import IsolationLevel
    from fetcher.log_start import LogStart
    from fetcher.planning import PartitionPlan, PlannedSegment, plan_partition
    from fetcher.scan import ScanRange
    from fetcher.timestamps import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
    from fetcher.transactions import CommittedBound
    from rlm.log.arrow import KAFKA_SCHEMA
    from rlm.log.record_json import record_obj
    from rlm.log.txn_index import AbortedTxn

# The names load on first use (PEP 562): a face that needs only part of the package (the Spark
# source's lookup and schema workers, which PySpark starts afresh for each step) does not pay for
# the read core's import (numba kernels, pyarrow readers) until it reads.
_HOMES = {
    "OffsetAnswer": "fetcher.core", "RemoteFetcher": "fetcher.core",
    "AbortedTransaction": "fetcher.fetch", "FetchResult": "fetcher.fetch",
    "IsolationLevel": "fetcher.isolation", "LogStart": "fetcher.log_start",
    "Frontier": "fetcher.frontier", "FrontierSource": "fetcher.frontier",
    "PartitionPlan": "fetcher.planning", "PlannedSegment": "fetcher.planning",
    "plan_partition": "fetcher.planning",
    "ScanRange": "fetcher.scan", "EARLIEST_TIMESTAMP": "fetcher.timestamps",
    "LATEST_TIMESTAMP": "fetcher.timestamps", "CommittedBound": "fetcher.transactions",
    # the record types and encoders the faces hand on, from Kafka's formats: faces take them from
    # here, never from rlm.log (an import contract), so no face decodes a batch itself
    "KAFKA_SCHEMA": "rlm.log.arrow", "record_obj": "rlm.log.record_json", "AbortedTxn": "rlm.log.txn_index",
}


__getattr__ = lazy_names.loader(__name__, _HOMES, globals())


__all__ = [
    "EARLIEST_TIMESTAMP",
    "KAFKA_SCHEMA",
    "LATEST_TIMESTAMP",
    "AbortedTransaction",
    "AbortedTxn",
    "CommittedBound",
    "FetchResult",
    "Frontier",
    "FrontierSource",
    "IsolationLevel",
    "LogStart",
    "OffsetAnswer",
    "PartitionPlan",
    "PlannedSegment",
    "RemoteFetcher",
    "ScanRange",
    "plan_partition",
    "record_obj",
]
