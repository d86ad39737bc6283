"""Remote log metadata managers (Kafka's RemoteLogMetadataManager, KIP-405).

- :mod:`rlmm.api` — the interface, with the shared value types and errors re-exported;
- :mod:`rlmm.serde` — Kafka's exact ``__remote_log_metadata`` record format;
- :mod:`rlmm.cache` — the compact in-memory state with Kafka's lookup semantics;
- :mod:`rlmm.file` — embedded store (one machine, no Kafka);
- :mod:`rlmm.topic` — the ``__remote_log_metadata`` topic, shared with Kafka brokers;
- :mod:`rlmm.loading` — ``rlmm.load(name, config)``: built-in names, entry points (group
  ``rlmm_plugins``) and ``module:Class`` paths, as :mod:`rsm_plugins.loading`;
- :mod:`rlmm.testing` — the contract suite every implementation runs.

The topic-backed manager is imported lazily so that using the file store does not load the
Kafka client library.
"""

from __future__ import annotations

from typing import Any

from rlmm.api import RemoteLogMetadataManager
from rlmm.cache import RemoteLogMetadataCache
from rlmm.file import FileRemoteLogMetadataManager
from rlmm.loading import ENTRY_POINT_GROUP, available, load, resolve
from rlmm.serde import RemoteLogMetadata, RemoteLogSegmentMetadataSnapshot, deserialize, serialize

__all__ = [
    "ENTRY_POINT_GROUP",
    "FileRemoteLogMetadataManager",
    "RemoteLogMetadata",
    "RemoteLogMetadataCache",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentMetadataSnapshot",
    "TopicBasedRemoteLogMetadataManager",
    "available",
    "deserialize",
    "load",
    "resolve",
    "serialize",
]


def __getattr__(name: str) -> Any:
    if name == "TopicBasedRemoteLogMetadataManager":
        from rlmm.topic import TopicBasedRemoteLogMetadataManager

        return TopicBasedRemoteLogMetadataManager
    raise AttributeError(f"module 'rlmm' has no attribute {name!r}")
