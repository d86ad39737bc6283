"""Keys written after the compacted range (the broker's local log above the remote history).

A newer value of a key supersedes every remote record of that key, tombstones included, so the
remote copy may drop them all: a consumer reading from offset 0 reaches the newer value in the
local log. This is the remote counterpart of the part of Kafka's offset map built from the dirty
range above the segments being cleaned (``Cleaner.buildOffsetMap``).

The caller must give only keys of records that will be read (data records of committed or
non-transactional batches, not aborted ones). The set has its own memory bound; keys that do not
fit are not added and :attr:`NewerKeys.complete` turns False. That is safe: a key left out only
keeps its older remote value (less is compacted, nothing wrong is read).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from rlm.compaction.digest import PROCESS_KEY, DigestKey, KeyDigests, digest_keys
from rlm.compaction.offset_map import OffsetMap

__all__ = ["NewerKeys"]

Arr = np.ndarray[Any, Any]


class NewerKeys:
    """A bounded set of key digests; build with :meth:`add`, :meth:`from_keys` or :meth:`from_arrow`."""

    def __init__(self, memory_bytes: int = 64 * 1024 * 1024, *, key: DigestKey = PROCESS_KEY) -> None:
        self._map = OffsetMap(memory_bytes)
        self._key = key
        self.complete = True

    @classmethod
    def from_keys(cls, keys: Iterable[bytes | None], memory_bytes: int = 64 * 1024 * 1024) -> NewerKeys:
        out = cls(memory_bytes)
        out.add(pa.array(list(keys), pa.binary()))
        return out

    @classmethod
    def from_arrow(cls, keys: pa.Array | pa.ChunkedArray, memory_bytes: int = 64 * 1024 * 1024) -> NewerKeys:
        out = cls(memory_bytes)
        out.add(keys)
        return out

    def add(self, keys: pa.Array | pa.ChunkedArray) -> None:
        """Add a column of keys (nulls ignored)."""
        digests = digest_keys(keys, self._key)
        n = len(digests)
        consumed = self._map.put_all(digests, np.zeros(n, np.int64), np.ones(n, np.bool_))
        if consumed < n:
            self.complete = False

    def __len__(self) -> int:
        return self._map.size

    def contains(self, digests: KeyDigests) -> Arr:
        """Per record: True where its key is in the set."""
        return self._map.get_all(digests) >= 0
