"""``python -m rlm.log.warmup`` (run by ``make install``) fills numba's cache with the kernels the
read side uses, at the argument types it uses them with: a later process that decodes a segment
through the read entry points loads every kernel from the cache and compiles nothing new."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_READ = """
import sys
from pathlib import Path
from rlm.log import Compression, encode_batch, read_arrow
data = b"".join(encode_batch([(b"k", b"v" * 300, [], 1_700_000_000_000 + i) for i in range(50)],
                             base_offset=50 * n, compression=c)
                for n, c in enumerate([Compression.ZSTD, Compression.NONE, Compression.LZ4]))
path = Path(sys.argv[1]) / "00000000000000000000.log"
path.write_bytes(data)
print(read_arrow(path, topic="t", partition=0).num_rows + read_arrow(data, topic="t", partition=0,
      start_offset=10, end_offset=120).num_rows)
"""


def _cache_files(cache: Path) -> dict[str, float]:
    return {str(p.relative_to(cache)): p.stat().st_mtime for p in cache.rglob("*.nb[ic]")}


def test_warmup_caches_what_a_later_read_uses(tmp_path: Path) -> None:
    cache = tmp_path / "numba-cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    env.pop("RLM_DISABLE_JIT", None)
    out = subprocess.run([sys.executable, "-m", "rlm.log.warmup"], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "kernels compiled and cached (80 rows" in out
    warmed = _cache_files(cache)
    names = {Path(n).name.split("-")[0] for n in warmed}
    for kernel in ("_kernel.scan_entries", "_kernel.check_crcs", "_kernel.decode_batches",
                   "_kernel.decode_v2", "_kernel._zstd_bound", "_kernel._records"):
        assert kernel in names, (kernel, sorted(names))
    read = subprocess.run([sys.executable, "-c", _READ, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300, check=True).stdout
    assert read.split() == ["260"]  # 150 rows from the file, 110 from offsets 10..119 of the bytes
    assert _cache_files(cache) == warmed  # nothing compiled or rewritten by the read
