"""The read side: historical reads of tiered partitions (Kafka's remote fetcher pool).

One core (:class:`RemoteFetcher`) answers which segments hold an offset on the current epoch
lineage (:mod:`fetcher.planning`), where to start and stop (remote index cache, offset and
time indexes), and how bytes become records (:mod:`fetcher.fetch`, :mod:`fetcher.scan`); the
CLI, the HTTP API, the Kafka-protocol endpoint and the Spark source are faces of it.
"""

from fetcher.core import OffsetAnswer, RemoteFetcher
from fetcher.fetch import AbortedTransaction, FetchResult, IsolationLevel
from fetcher.frontier import Frontier, FrontierSource
from fetcher.log_start import LogStart
from fetcher.planning import PartitionPlan, PlannedSegment, plan_partition
from fetcher.scan import ScanRange
from fetcher.timestamps import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from fetcher.transactions import CommittedBound

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "AbortedTransaction",
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
]
