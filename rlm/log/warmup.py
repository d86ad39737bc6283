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
from rlm.log.encode import encode_batch
from rlm.log.records import Compression, decode_records, iter_batches, read_batch_bytes


def _segment() -> bytes:
    """A few batches, one per codec, with keys, values, headers and a null value."""
    out = bytearray()
    offset = 0
    for codec in Compression:
        records = [
            (b"k%d" % i, None if i == 2 else b"v" * (i + 1), [("h", b"x")], 1_700_000_000_000 + i)
            for i in range(4)
        ]
        out += encode_batch(records, base_offset=offset, compression=codec)
        offset += len(records)
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
