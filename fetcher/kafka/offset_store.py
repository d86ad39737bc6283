"""Committed consumer offsets of the endpoint's groups, kept in one small JSON file.

The endpoint is its own group coordinator (librdkafka asks a coordinator even for ``assign``),
so offsets committed through it live beside the read side's work dir, never in the real
cluster's ``__consumer_offsets``: a history reader's position must not move a live group's.
Each commit rewrites the file atomically (temp + fsync + rename); it is tiny.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Committed:
    offset: int
    leader_epoch: int
    metadata: str | None


class OffsetStore:
    """group -> topic -> partition -> :class:`Committed`; thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, dict[int, Committed]]] = {}
        if path.exists():
            try:
                raw = json.loads(path.read_text())
                for g, topics in raw.items():
                    for t, parts in topics.items():
                        for p, c in parts.items():
                            self._data.setdefault(g, {}).setdefault(t, {})[int(p)] = Committed(
                                int(c["offset"]), int(c.get("leader_epoch", -1)), c.get("metadata")
                            )
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                log.warning("kafka_endpoint_offsets_unreadable", path=str(path), error=str(e))

    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        with self._lock:
            return self._data.get(group, {}).get(topic, {}).get(partition)

    def topics(self, group: str) -> dict[str, dict[int, Committed]]:
        with self._lock:
            return {t: dict(ps) for t, ps in self._data.get(group, {}).items()}

    def commit(self, group: str, entries: list[tuple[str, int, Committed]]) -> None:
        with self._lock:
            g = self._data.setdefault(group, {})
            for topic, partition, c in entries:
                g.setdefault(topic, {})[partition] = c
            self._save()

    def _save(self) -> None:
        out = {
            g: {
                t: {
                    str(p): {"offset": c.offset, "leader_epoch": c.leader_epoch, "metadata": c.metadata}
                    for p, c in ps.items()
                }
                for t, ps in ts.items()
            }
            for g, ts in self._data.items()
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(out, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
