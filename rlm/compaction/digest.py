"""128-bit keyed digests of record keys, computed for a whole Arrow column in one compiled call.

Why not MD5 like Kafka's ``SkimpyOffsetMap`` (``LogCleaner.scala``/``SkimpyOffsetMap.java``
hashes every key with MD5): hashing per record through ``hashlib`` would be a per-record Python
loop. The digest here is SipHash-1-3 with 128-bit output (Aumasson & Bernstein's keyed PRF, as
Rust's standard hash maps use it), written once below and compiled by numba. It is keyed with a
random 128-bit key per process, so a producer who controls the keys cannot search for two keys
that collide (a collision would make the cleaner drop the older key's latest value): without the
key, finding one is as hard as breaking the PRF. Digests are therefore only comparable within one
process (the offset map and the newer-key set of one compaction share :data:`PROCESS_KEY`).

A digest of all zeros marks an empty slot in :mod:`rlm.compaction.offset_map`, so a key whose
digest happens to be zero gets its lowest bit set (probability 2**-128).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from numba import njit

from rlm.compaction.errors import InvalidCompactionInput

__all__ = ["PROCESS_KEY", "DigestKey", "KeyDigests", "digest_keys"]

Arr = np.ndarray[Any, Any]


@dataclass(frozen=True, slots=True)
class DigestKey:
    """The two 64-bit halves of the SipHash key."""

    k0: int
    k1: int

    @classmethod
    def random(cls) -> DigestKey:
        return cls(secrets.randbits(64), secrets.randbits(64))


PROCESS_KEY = DigestKey.random()


@dataclass(frozen=True, slots=True)
class KeyDigests:
    """Digests of one key column: ``hi``/``lo`` halves and ``has_key`` (False for a null key)."""

    hi: Arr
    lo: Arr
    has_key: Arr

    def __len__(self) -> int:
        return int(self.hi.shape[0])


@njit(cache=True, nogil=True, inline="always")
def _rotl(x: Any, r: Any) -> Any:  # pragma: no cover - jitted
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, nogil=True, inline="always")
def _round(v0: Any, v1: Any, v2: Any, v3: Any) -> Any:  # pragma: no cover - jitted
    """One SipRound."""
    v0 += v1
    v1 = _rotl(v1, 13)
    v1 ^= v0
    v0 = _rotl(v0, 32)
    v2 += v3
    v3 = _rotl(v3, 16)
    v3 ^= v2
    v0 += v3
    v3 = _rotl(v3, 21)
    v3 ^= v0
    v2 += v1
    v1 = _rotl(v1, 17)
    v1 ^= v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@njit(cache=True, nogil=True)
def _siphash13_128(data: Any, start: Any, end: Any, k0: Any, k1: Any) -> Any:  # pragma: no cover - jitted
    v0 = k0 ^ np.uint64(0x736F6D6570736575)
    v1 = k1 ^ np.uint64(0x646F72616E646F6D) ^ np.uint64(0xEE)
    v2 = k0 ^ np.uint64(0x6C7967656E657261)
    v3 = k1 ^ np.uint64(0x7465646279746573)
    n = end - start
    whole = start + (n // 8) * 8
    for p in range(start, whole, 8):
        m = np.uint64(0)
        for j in range(8):
            m |= np.uint64(data[p + j]) << np.uint64(8 * j)
        v3 ^= m
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
        v0 ^= m
    m = np.uint64(n & 0xFF) << np.uint64(56)
    for j in range(end - whole):
        m |= np.uint64(data[whole + j]) << np.uint64(8 * j)
    v3 ^= m
    v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    v0 ^= m
    v2 ^= np.uint64(0xEE)
    for _ in range(3):
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    out0 = v0 ^ v1 ^ v2 ^ v3
    v1 ^= np.uint64(0xDD)
    for _ in range(3):
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    out1 = v0 ^ v1 ^ v2 ^ v3
    if out0 == np.uint64(0) and out1 == np.uint64(0):
        out1 = np.uint64(1)
    return out0, out1


@njit(cache=True, nogil=True)
def _digest_column(offsets: Any, data: Any, valid: Any, k0: Any, k1: Any,
                   hi: Any, lo: Any) -> None:  # pragma: no cover - jitted
    for i in range(offsets.shape[0] - 1):
        if valid[i]:
            a, b = _siphash13_128(data, offsets[i], offsets[i + 1], k0, k1)
            hi[i] = a
            lo[i] = b
        else:
            hi[i] = np.uint64(0)
            lo[i] = np.uint64(0)


def digest_keys(keys: pa.Array | pa.ChunkedArray, key: DigestKey = PROCESS_KEY) -> KeyDigests:
    """Digest every key of a ``binary``/``large_binary`` column (nulls: ``has_key`` False)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if pa.types.is_binary(keys.type) or pa.types.is_string(keys.type):
        keys = keys.cast(pa.large_binary())
    elif not pa.types.is_large_binary(keys.type):
        raise InvalidCompactionInput(f"record keys must be a binary column, not {keys.type}")
    n = len(keys)
    _, off_buf, data_buf = keys.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64, count=n + 1, offset=keys.offset * 8)
    has_data = data_buf is not None and data_buf.size > 0
    data = np.frombuffer(data_buf, dtype=np.uint8) if has_data else np.zeros(1, np.uint8)
    has_key = keys.is_valid().to_numpy(zero_copy_only=False).astype(np.bool_)
    hi = np.empty(n, np.uint64)
    lo = np.empty(n, np.uint64)
    if n:
        _digest_column(offsets, data, has_key, np.uint64(key.k0), np.uint64(key.k1), hi, lo)
    return KeyDigests(hi, lo, has_key)
