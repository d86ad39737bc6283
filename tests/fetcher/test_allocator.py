"""Serving processes reuse freed megabyte buffers instead of faulting fresh pages in each time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from fetcher.allocator import tune_allocator

PROBE = textwrap.dedent("""
    import json, os, resource, sys, threading
    from fetcher.allocator import tune_allocator
    applied = tune_allocator(int(sys.argv[1]), int(sys.argv[2])) if sys.argv[1] != "-" else None
    parts = [memoryview(os.urandom(1 << 20)) for _ in range(8)]
    # An endpoint's reader threads join each partition's records (one Fetch: 4 x 8 MiB), and which
    # thread (so which glibc arena) gets how many of a Fetch's joins varies. A pool's scheduler
    # varies it at random, so the measure would be the scheduler's; here it varies on a fixed
    # plan: Fetch n is joined all by thread n % 4, whose arena then frees 32 MiB at once.
    answer = [b""] * 4
    start, done = threading.Barrier(5), threading.Barrier(5)
    fetches = 0

    def reader(i):
        while True:
            start.wait()
            if fetches % 4 == i:
                for k in range(4):
                    answer[k] = b"".join(parts)
            done.wait()

    for i in range(4):
        threading.Thread(target=reader, args=(i,), daemon=True).start()
    sent = []

    def fetch():
        global sent, fetches
        start.wait()
        done.wait()
        sent = list(answer)  # the answer being sent stays alive while the next is read
        fetches += 1

    for _ in range(8):  # warm-up: the heaps grow to the working set
        fetch()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(16):
        fetch()
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
    assert default["faults"] >= pages // 4  # most 8 MiB answers faulted in anew (75 % measured)
    assert tuned["faults"] < pages // 20  # reused from the heap (none measured, idle or loaded)


def test_zero_leaves_the_allocator_alone() -> None:
    assert tune_allocator(0, 0) is False
