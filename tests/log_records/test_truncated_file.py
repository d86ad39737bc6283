"""A segment truncated while it is being read (Kafka truncates live segments; so can an operator)
must end the read with a typed error. A memory-mapped reader would die of SIGBUS instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.log import Compression, encode_batch
from tests.services.proc import REPO_ROOT

# The reader runs in its own process so that a SIGBUS kills only it and shows as a signal exit.
_READER = """
import sys
import rlm.log.source
from rlm.errors import LogFileGoneError
from rlm.log import iter_arrow_batches, iter_batches
rlm.log.source.WINDOW = 64 * 1024  # read in small windows so most of the file is read after the cut
path, how = sys.argv[1], sys.argv[2]
if how == "arrow":
    it = iter_arrow_batches(path, topic="t", partition=0, max_batch_rows=50)
else:
    it = iter_batches(path)
next(it)
print("reading", flush=True)
sys.stdin.readline()  # the test truncates the file now
try:
    for _ in it:
        pass
except LogFileGoneError as e:
    print("gone", e.path, e.position, flush=True)
else:
    print("finished", flush=True)
"""


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    path = tmp_path / "00000000000000000000.log"
    offset = 0
    with open(path, "wb") as f:
        for b in range(200):  # about 4 MiB of 20 KiB batches
            records = [(b"k%d" % i, os.urandom(200), None, 1000 + i) for i in range(100)]
            codec = Compression.NONE if b % 2 else Compression.ZSTD
            f.write(encode_batch(records, base_offset=offset, compression=codec))
            offset += 100
    return path


@pytest.mark.parametrize("how", ["arrow", "batches"])
def test_truncation_underneath_a_reader_raises_log_file_gone(segment: Path, how: str) -> None:
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(segment), how],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdin is not None and reader.stdout is not None
    assert reader.stdout.readline().strip() == "reading"
    os.truncate(segment, 100_000)  # this process, not the reader, cuts the file (like a broker)
    reader.stdin.write("go\n")
    reader.stdin.flush()
    out = reader.stdout.read()
    code = reader.wait()
    assert code == 0, f"reader died with {code} (signal {-code} if negative): {out}"
    words = out.split()
    assert words[0] == "gone" and words[1] == str(segment), out
    assert int(words[2]) >= 100_000
