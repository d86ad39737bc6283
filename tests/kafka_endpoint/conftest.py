"""A standalone tiered log dir (file metadata + local storage, no broker) served by the endpoint.

Two partitions of ``events`` written by ``rlm.log.writer`` (idempotent and transactional batches,
commits and aborts, a leader-epoch change in partition 0), tiered by ``rlm run --once``; the
local segments stay on disk only so tests can compute what a consumer must receive.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread
from rlm.commands.kafka_serve import start_kafka_listener
from rlm.log.partition import PartitionDir
from rlm.log.records import Record, iter_records
from rlm.types import KafkaUuid
from tests.daemon.test_standalone import cfg_for, run_once, write_partition

TOPIC = "events"
PARTITIONS = 2
BATCHES = 240


@dataclass(frozen=True)
class Expected:
    """Per partition: (offset, key, value) of every data record the remote tier holds."""

    uncommitted: dict[int, list[tuple[int, bytes | None, bytes | None]]]
    committed: dict[int, list[tuple[int, bytes | None, bytes | None]]]
    log_end: dict[int, int]
    timestamps: dict[int, list[tuple[int, int]]]  # (offset, timestamp)


def _aborted_key(key: bytes | None) -> bool:
    """write_partition aborts batch b when b % 5 == 4 and b % 15 == 14 (keys are k{b}-{i})."""
    assert key is not None
    b = int(key.decode().split("-")[0][1:])
    return b % 5 == 4 and b % 15 == 14


@dataclass
class Served:
    fetcher: RemoteFetcher
    endpoint: EndpointThread
    expected: Expected
    work: Path

    @property
    def bootstrap(self) -> str:
        return self.endpoint.bootstrap


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("kafka-endpoint")
    logs = tmp / "logs"
    tid = KafkaUuid.random()
    for p in range(PARTITIONS):
        write_partition(
            logs, TOPIC, p, BATCHES, topic_id=tid, epoch_change_at=BATCHES // 2 if p == 0 else None
        )
    cfg = cfg_for(logs, tmp / "work")
    run_once(cfg)
    fetcher = RemoteFetcher.from_config(cfg)
    unc: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
    com: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
    ends: dict[int, int] = {}
    stamps: dict[int, list[tuple[int, int]]] = {}
    for p in range(PARTITIONS):
        end = fetcher.plan(TOPIC, p).log_end
        ends[p] = end
        rows = []
        stamps[p] = []  # every record, control markers too: Kafka's timestamp lookup counts them
        for seg in PartitionDir(logs / f"{TOPIC}-{p}").inactive_segments():
            for h, r in iter_records(seg.log_path):
                if r.offset >= end:
                    continue
                stamps[p].append((r.offset, r.timestamp))
                if isinstance(r, Record) and not h.is_control:
                    rows.append((r.offset, r.key, r.value))
        unc[p] = rows
        com[p] = [(o, k, v) for o, k, v in rows if not _aborted_key(k)]
        assert len(unc[p]) > len(com[p]) > 0
    endpoint = start_kafka_listener(fetcher, "127.0.0.1", 0, state_dir=tmp / "endpoint-state")
    try:
        yield Served(fetcher, endpoint, Expected(unc, com, ends, stamps), tmp)
    finally:
        endpoint.close()
        fetcher.close()
