"""Remote log metadata managers (Kafka's RemoteLogMetadataManager, KIP-405).

- :mod:`rlmm.api` — the interface, with the shared value types and errors re-exported;
- :mod:`rlmm.serde` — Kafka's exact ``__remote_log_metadata`` record format;
- :mod:`rlmm.cache` — the compact in-memory state with Kafka's lookup semantics;
- :mod:`rlmm.file` — embedded store (one machine, no Kafka);
- :mod:`rlmm.topic` — the ``__remote_log_metadata`` topic, shared with Kafka brokers;
- :mod:`rlmm.loading` — ``rlmm.load(name, config)``: built-in names, entry points (group
  ``rlmm_plugins``) and ``module:Class`` paths, as :mod:`rsm_plugins.loading`;
- :mod:`rlmm.testing` — the contract suite every implementation runs.

The managers and the cache are imported lazily: using the file store does not load the Kafka
client library, and a command that only decodes records (``rlm metadata dump``, ``rlm --help``)
does not load numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlm import lazy_names
from rlmm.api import RemoteLogMetadataManager
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


if TYPE_CHECKING:
    from rlmm.cache import RemoteLogMetadataCache
    from rlmm.file import FileRemoteLogMetadataManager
    from rlmm.topic import TopicBasedRemoteLogMetadataManager

_HOMES = {"RemoteLogMetadataCache": "rlmm.cache", "FileRemoteLogMetadataManager": "rlmm.file",
          "TopicBasedRemoteLogMetadataManager": "rlmm.topic"}


__getattr__ = lazy_names.loader(__name__, _HOMES, globals())
