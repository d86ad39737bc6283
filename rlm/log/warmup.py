"""Compile the record-decoding kernels into numba's on-disk cache ahead of their first use.

The kernels in :mod:`rlm.log._kernel` are compiled on first call (``njit(cache=True)``) and the
machine code is cached beside the module. On a fresh install that first call costs several
seconds of CPU in every process that decodes before the cache exists: the first ``rlm fetch``,
the daemon's first verification, each Spark worker of the first job. ``make install`` and the
container build run ``python -m rlm.log.warmup`` once, as pip byte-compiles ``.pyc`` files, so
no user-facing command pays it. The warm-up decodes a small generated segment through the same
public entry points the read side uses (a file path, a bytes buffer, every codec), which is what
fixes the kernels' argument types, so the cached signatures are the ones used later.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from rlm.log.arrow import read_arrow
from rlm.log.codecs import compress
from rlm.log.encode import assemble_batch, encode_batch
from rlm.log.model import RECORD_BATCH_OVERHEAD
from rlm.log.records import Compression, decode_records, iter_batches, read_batch_bytes


def _segment() -> bytes:
    """A few batches, one per codec, with keys, values, headers and a null value; and a gzip batch
    of two members, which the compiled loop leaves to the per-batch path (that kernel too)."""
    out = bytearray()
    offset = 0
    records = [
        (b"k%d" % i, None if i == 2 else b"v" * (i + 1), [("h", b"x")], 1_700_000_000_000 + i)
        for i in range(4)
    ]
    for codec in Compression:
        out += encode_batch(records, base_offset=offset, compression=codec)
        offset += len(records)
    plain = encode_batch(records, base_offset=offset)
    header = next(iter_batches(plain))
    payload = plain[RECORD_BATCH_OVERHEAD:]
    out += assemble_batch(
        base_offset=offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes | Compression.GZIP,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        count=header.records_count,
        payload=compress(Compression.GZIP, payload[:9]) + compress(Compression.GZIP, payload[9:]),
    )
    return bytes(out)


def warm_kernels() -> int:
    """Decode the generated segment every way the read side does; returns the rows decoded."""
    data = _segment()
    rows = 0
    with tempfile.TemporaryDirectory(prefix="rlm-warmup-") as tmp:
        path = Path(tmp) / "00000000000000000000.log"
        path.write_bytes(data)
        rows += int(read_arrow(path, topic="warmup", partition=0).num_rows)
        rows += int(read_arrow(data, topic="warmup", partition=0, start_offset=1, end_offset=9).num_rows)
        rows += int(read_arrow(data, topic="warmup", partition=0, verify_crc=False).num_rows)
    for header in iter_batches(data):
        rows += len(decode_records(read_batch_bytes(data, header)))
    return rows


def main() -> int:
    t0 = time.monotonic()
    rows = warm_kernels()
    print(f"rlm.log.warmup: record-decoding kernels compiled and cached ({rows} rows, "
          f"{time.monotonic() - t0:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
