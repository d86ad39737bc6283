"""The read side: historical reads of tiered partitions (Kafka's remote fetcher pool).

One core (:class:`RemoteFetcher`) answers which segments hold an offset on the current epoch
lineage (:mod:`fetcher.planning`), where to start and stop (remote index cache, offset and
time indexes), and how bytes become records (:mod:`fetcher.fetch`, :mod:`fetcher.scan`); the
CLI, the HTTP API, the Kafka-protocol endpoint and the Spark source are faces of it.
"""

import importlib
from typing import TYPE_CHECKING, Any

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
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fetcher' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


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
