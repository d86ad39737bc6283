"""A keyed workload for compacted topics and the model of what a reader must see of it.

The workload (the same for every topic it is written to): rounds of updates to every key from an
idempotent producer, tombstones, a committed and an aborted transaction, keys deleted and then
written again, more updates so the segments holding all of that roll. :class:`Written` keeps every
record by offset (as the broker acknowledged it) and the model: per key, the last committed value
(``None`` = deleted), which is what the broker's cleaner keeps — and what a reader of the tiered
history must end with.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTp

from rlm.daemon.compacted import cleaner_checkpoint
from rlm.types import TopicPartition
from tests.daemon.helpers import CONSUME_GIVE_UP_S, consume_partition, transactional_producer, wait_for
from tests.daemon.helpers import set_topic_config as set_topic_config  # re-exported for the tests here

KEYS = 300
PAD = b"v" * 1500  # ~1.5 KB records: a round of KEYS updates is ~0.45 MB, 1 MB segments roll
Row = tuple[int, bytes | None, bytes | None]
_GIVE_UP_S = CONSUME_GIVE_UP_S


def key(k: int) -> bytes:
    return f"key-{k:04d}".encode()


@dataclass
class Written:
    """What the broker acknowledged: every data record by offset, the aborted ones, the model."""

    records: dict[int, tuple[bytes | None, bytes | None]] = field(default_factory=dict)
    aborted: set[int] = field(default_factory=set)

    def final(self) -> dict[bytes, bytes]:
        """Per key the last committed value; deleted keys (last write a tombstone) are absent."""
        out: dict[bytes, bytes | None] = {}
        for off in sorted(self.records):
            if off not in self.aborted:
                k, v = self.records[off]
                assert k is not None
                out[k] = v
        return {k: v for k, v in out.items() if v is not None}


def final_of(rows: list[Row]) -> dict[bytes, bytes]:
    """Per key the last value a reader saw, in offset order; a last tombstone = deleted."""
    out: dict[bytes, bytes | None] = {}
    for _, k, v in sorted(rows, key=lambda r: r[0]):
        assert k is not None
        out[k] = v
    return {k: v for k, v in out.items() if v is not None}


def _acked(w: Written, aborted: bool = False) -> Any:
    def cb(err: Any, msg: Any) -> None:
        assert err is None, err
        w.records[msg.offset()] = (msg.key(), msg.value())
        if aborted:
            w.aborted.add(msg.offset())

    return cb


def _round(p: Producer, topic: str, keys: range, tag: str, w: Written, aborted: bool = False) -> None:
    cb = _acked(w, aborted)
    for k in keys:
        value = None if tag == "tombstone" else f"{tag}-{k}-".encode() + PAD
        p.produce(topic, key=key(k), value=value, partition=0, on_delivery=cb)
        p.poll(0)


def write_workload(bootstrap: str, topic: str, rounds: int = 3) -> Written:
    """The keyed workload above into partition 0 of ``topic``."""
    w = Written()
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for r in range(rounds):
        _round(p, topic, range(KEYS), f"r{r}", w)
    _round(p, topic, range(0, 50), "tombstone", w)
    assert p.flush(60) == 0
    tx = transactional_producer(bootstrap, f"{topic}-tx")
    tx.begin_transaction()
    _round(tx, topic, range(50, 100), "committed", w)
    tx.commit_transaction(30)
    tx.begin_transaction()
    _round(tx, topic, range(100, 150), "aborted", w, aborted=True)
    assert tx.flush(30) == 0  # acknowledged (offsets known) before the abort
    tx.abort_transaction(30)
    _round(p, topic, range(0, 10), "reborn", w)
    _round(p, topic, range(150, KEYS), f"r{rounds}", w)
    assert p.flush(60) == 0
    tx.flush(30)
    return w


def update_keys(bootstrap: str, topic: str, keys: range, tag: str, w: Written) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    _round(p, topic, keys, tag, w)
    assert p.flush(60) == 0


def checkpoint(log_dir: Path, topic: str) -> int:
    """The broker cleaner's checkpoint for partition 0 (0 before its first pass)."""
    return cleaner_checkpoint(log_dir / f"{topic}-0", TopicPartition(topic, 0)) or 0


def wait_cleaned_past(log_dir: Path, topic: str, offset: int) -> int:
    """Waits until the broker's cleaner checkpoint passes ``offset`` (its backoff is 15 s)."""
    wait_for(f"{topic} cleaned past {offset}", lambda: checkpoint(log_dir, topic) > offset, timeout=120)
    return checkpoint(log_dir, topic)


def read_from(bootstrap: str, topic: str, offset: int, isolation: str, until: int) -> list[Row]:
    """Every record a consumer at ``offset`` gets until the end of the partition passed ``until``."""
    return consume_partition(bootstrap, topic, offset, isolation, until=until)


def first_offset_from(bootstrap: str, topic: str, offset: int) -> int:
    """The offset of the first record a consumer assigned at ``offset`` receives."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    try:
        c.assign([CkTp(topic, 0, offset)])
        give_up = time.monotonic() + _GIVE_UP_S
        while time.monotonic() < give_up:
            m = c.poll(1.0)
            if m is not None and not m.error():
                return int(m.offset())
        raise AssertionError(f"{topic}: nothing served from offset {offset}")
    finally:
        c.close()


def high_watermark(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw"})
    try:
        return int(c.get_watermark_offsets(CkTp(topic, 0), timeout=10)[1])
    finally:
        c.close()


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (the local storage plugin's remote objects)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
