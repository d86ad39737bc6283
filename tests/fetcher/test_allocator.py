"""Serving processes reuse freed megabyte buffers instead of faulting fresh pages in each time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from fetcher.allocator import tune_allocator

PROBE = textwrap.dedent("""
    import json, os, resource, sys
    from concurrent.futures import ThreadPoolExecutor
    from fetcher.allocator import tune_allocator
    applied = tune_allocator(int(sys.argv[1]), int(sys.argv[2])) if sys.argv[1] != "-" else None
    parts = [memoryview(os.urandom(1 << 20)) for _ in range(8)]
    pool = ThreadPoolExecutor(4)  # an endpoint's reader threads join each partition's records

    def answers(keep):
        keep.extend(pool.map(lambda _: b"".join(parts), range(4)))  # one Fetch: 4 x 8 MiB
        return keep[-4:]  # the answer being sent stays alive while the next is read

    keep = []
    for _ in range(8):  # warm-up: the heaps grow to the working set
        keep = answers(keep)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(16):
        keep = answers(keep)
    print(json.dumps({"applied": applied,
                      "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
""")



def probe(*args: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_thresholds_reuse_freed_buffers_instead_of_new_pages() -> None:
    default = probe("-")
    tuned = probe(str(64 << 20), str(512 << 20))
    assert tuned["applied"] is True
    pages = 16 * 4 * (8 << 20) // 4096  # of the 64 answers joined after the warm-up
    assert isinstance(default["faults"], int) and isinstance(tuned["faults"], int)
    assert default["faults"] >= pages // 4  # most 8 MiB answers mapped and faulted in anew (~60 %)
    assert tuned["faults"] < pages // 10  # reused from the heap (0-5 % measured)


def test_zero_leaves_the_allocator_alone() -> None:
    assert tune_allocator(0, 0) is False
