"""``rlm restore --reserve-producer-ids``: the new cluster never hands out a restored producer id.

The restored producer state (the ``.snapshot`` written by ``rlm restore``) holds the old cluster's
producer ids with their epochs and last sequences. A new KRaft cluster's producer-id allocator
starts at 0 again, like the old one did: a *new* idempotent producer can be given an id the
restored state holds, and its first batch (sequence 0) is refused with OUT_OF_ORDER_SEQUENCE_NUMBER.
Kafka offers no way to set the allocator's start: the controller's ``ProducerIdsRecord`` is only
advanced by ``AllocateProducerIds`` (broker to controller, a block of 1000 ids per call), which a
broker sends when the ids of its current block run out. So the allocator is advanced the way a
broker would advance it: by asking every broker for producer ids (``InitProducerId`` without a
transactional id, what every idempotent producer sends) until each one answers an id above the
highest restored one. Once one broker is past it, the controller's next block is too, so no
broker's later block can clash; each broker's current (or prefetched) block is used up by the loop.

Run it once the brokers have started with the restored files and **before producers connect**.
Cost: about one round trip per id below the highest restored one, plus one per broker (the old
cluster's ids are usually few: a producer id is taken per producer session, so ~1000 per second
is a bound worth knowing for clusters that made millions). Plaintext listeners only (the request is
sent over a bare socket); for SASL/TLS clusters see docs/disaster-recovery.md.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path

from rlm.errors import RlmError
from rlm.log.producer_snapshot import read_snapshot

_INIT_PRODUCER_ID = 22
_VERSION = 4  # flexible: compact strings and tagged fields; supported by Kafka 2.7 to 4.x
#: request timed out, coordinator loading / not available / not coordinator, concurrent transactions
_RETRIABLE = {7, 14, 15, 16, 51}


class ProducerIdReserveError(RlmError):
    """A broker refused to hand out producer ids, or did not answer in time."""


def highest_restored_producer_id(partition_dirs: Iterable[Path]) -> int:
    """The highest producer id in the restored ``.snapshot`` files, -1 when there is none."""
    best = -1
    for pdir in partition_dirs:
        for snap in pdir.glob("*.snapshot"):
            for entry in read_snapshot(snap):
                best = max(best, entry.producer_id)
    return best


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def init_producer_id(sock: socket.socket, correlation_id: int) -> tuple[int, int]:
    """One ``InitProducerId`` v4 round trip: (error code, producer id)."""
    client = b"rlm-restore"
    header = struct.pack(">hhih", _INIT_PRODUCER_ID, _VERSION, correlation_id, len(client)) + client + b"\0"
    body = b"\0" + struct.pack(">iqh", 60_000, -1, -1) + b"\0"  # null transactional id, no tags
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    (size,) = struct.unpack(">i", _recv(sock, 4))
    data = _recv(sock, size)
    (corr,) = struct.unpack_from(">i", data, 0)
    if corr != correlation_id:
        raise ProducerIdReserveError(f"response to correlation id {corr}, expected {correlation_id}")
    _throttle, error, pid, _epoch = struct.unpack_from(">ihqh", data, 5)  # after the header's empty tags
    return int(error), int(pid)


def reserve_past(brokers: Iterable[tuple[str, int]], highest: int,
                 timeout_s: float = 120.0) -> dict[str, int]:
    """Ask each broker for producer ids until it answers one above ``highest``; returns the first
    such id per broker (``host:port``)."""
    out: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    for host, port in brokers:
        name = f"{host}:{port}"
        with socket.create_connection((host, port), timeout=30) as sock:
            corr = 0
            while True:
                if time.monotonic() > deadline:
                    raise ProducerIdReserveError(f"{name}: producer ids not past {highest} in {timeout_s} s")
                corr += 1
                error, pid = init_producer_id(sock, corr)
                if error in _RETRIABLE:
                    time.sleep(0.2)
                    continue
                if error:
                    raise ProducerIdReserveError(f"{name}: InitProducerId failed with error code {error}")
                if pid > highest:
                    out[name] = pid
                    break
    return out
