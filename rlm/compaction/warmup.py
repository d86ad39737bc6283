"""Load (or compile) remote compaction's kernels before the first compaction needs them.

The digest, offset-map and re-framing loops are ``njit(cache=True)``: compiled once into numba's
on-disk cache, then loaded by each process on first call, which costs a few seconds of CPU
(more on a loaded machine). A daemon calls :func:`warm_kernels` when it starts, so its first
compaction runs at full speed; ``python -m rlm.compaction.warmup`` fills the cache after an
install, like ``python -m rlm.log.warmup``. The warm-up compacts a small generated segment from a
file path and from bytes, with tombstones, a re-framed batch and several map passes: the same
entry points and argument types a real compaction uses.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from rlm.compaction.engine import CompactionInput, compact, compact_to_batches
from rlm.compaction.settings import CompactionSettings
from rlm.log.encode import encode_batch
from rlm.log.model import Compression

_NOW = 1_700_000_000_000


def _segment() -> bytes:
    out = bytearray()
    for b, codec in enumerate((Compression.NONE, Compression.ZSTD)):
        records = [(b"k%d" % (i % 3), None if i == 1 else b"v%d" % i, [("h", b"x")], _NOW - 10_000 + i)
                   for i in range(4)]
        out += encode_batch(records, base_offset=4 * b, compression=codec)
    return bytes(out)


def warm_kernels() -> int:
    """Run two small compactions; returns the records kept (for the caller's log line)."""
    data = _segment()
    settings = CompactionSettings(offset_map_memory_bytes=60)  # two keys per pass: several passes
    with tempfile.TemporaryDirectory(prefix="rlm-compaction-warmup-") as tmp:
        path = Path(tmp) / "00000000000000000000.log"
        path.write_bytes(data)
        kept = compact(CompactionInput([path]), Path(tmp) / "out", settings, now_ms=_NOW).records_kept
    _, result = compact_to_batches(CompactionInput([data]), now_ms=_NOW)
    return kept + result.records_kept


def main() -> int:
    t0 = time.monotonic()
    kept = warm_kernels()
    took = time.monotonic() - t0
    print(f"rlm.compaction.warmup: kernels loaded and cached ({kept} records kept, {took:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
