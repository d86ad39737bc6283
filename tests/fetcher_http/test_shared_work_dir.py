"""Two ``rlm serve`` processes and ``rlm fetch`` runs on one work dir, reading concurrently.

They share ``remote-log-index-cache/``, bounded here to a fraction of the partitions' indexes so
entries are written and evicted all the time, by every process. A process must not delete
another's temporary files when it starts, nor fail because another evicted an entry it was using:
every HTTP answer is byte for byte what the read core returns straight from storage, every
``rlm fetch`` prints the right records and exits 0, no process logs an error, and afterwards the
directory is within its bound with no temporary file left.
"""

from __future__ import annotations

import base64
import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests
import yaml

from fetcher import RemoteFetcher
from fetcher.index_cache import DIR_NAME
from tests.fetcher_http.conftest import TOPIC, Tiered
from tests.fetcher_http.test_serve_cli import ROOT, free_port, start, stop, wait_json

pytestmark = pytest.mark.slow

RAW = "application/vnd.kafka.record-batches"
FETCH_RUNS = 6


def _index_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.suffix in (".index", ".timeindex", ".txnindex"))


def test_two_serves_and_fetch_share_one_work_dir(tiered: Tiered, tmp_path: Path) -> None:
    # the truth, from a reader with its own work dir
    with RemoteFetcher.from_config(tiered.config(tmp_path / "truth")) as f:
        queries = []
        for tp in tiered.tips:
            for link in f.plan(TOPIC, tp.partition).segments:
                queries += [(tp.partition, link.first), (tp.partition, (link.first + link.last) // 2)]
        answers = {q: f.fetch(TOPIC, q[0], q[1], max_bytes=1).records for q in queries}
        values = {
            (tp.partition, o): (k, v)
            for tp in tiered.tips
            for b in f.scan(TOPIC, tp.partition)
            for o, k, v in zip(
                b.column("offset").to_pylist(), b.column("key").to_pylist(), b.column("value").to_pylist(),
                strict=True,
            )
        }
        segments = sum(len(f.plan(TOPIC, tp.partition).segments) for tp in tiered.tips)
    full = _index_bytes(tmp_path / "truth" / DIR_NAME)
    bound = full * 3 // segments  # about three entries of the partitions' many
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({
        "work_dir": str(tmp_path / "shared"),
        "storage": {"plugin": "local", "config": {"root": str(tiered.work / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(tiered.work / "metadata")}},
        "index_file_cache_total_size_bytes": bound,
        "read": {"fetch_max_wait_ms": 60_000},
    }))
    ports = [free_port(), free_port()]
    logs = [tmp_path / f"serve{i}.log" for i in range(2)]
    procs = [start(["serve", "--config", str(cfg), "--port", str(ports[i])], logs[i]) for i in range(2)]
    failures: list[str] = []
    reads = [0]
    done = threading.Event()

    def http_reader(port: int, seed: int) -> None:
        rnd = random.Random(seed)
        with requests.Session() as s:
            while not done.is_set():
                q = rnd.choice(queries)
                try:
                    r = s.get(f"http://127.0.0.1:{port}/v1/topics/{TOPIC}/partitions/{q[0]}/records",
                              params={"offset": q[1], "max_bytes": 1}, headers={"Accept": RAW}, timeout=60)
                except requests.RequestException as e:
                    failures.append(f"{port} {q}: {e}")
                    continue
                if r.status_code != 200 or r.content != answers[q]:
                    failures.append(f"{port} {q}: {r.status_code} {r.text[:200]!r}")
                reads[0] += 1

    try:
        for port, proc, log in zip(ports, procs, logs, strict=True):
            wait_json(f"http://127.0.0.1:{port}/health", lambda b: b["status"] == "ok", proc, log)
        readers = [threading.Thread(target=http_reader, args=(ports[i % 2], i)) for i in range(4)]
        for t in readers:
            t.start()
        rnd = random.Random(7)
        try:
            for _ in range(FETCH_RUNS):  # each run is a process start on the shared directory
                partition, offset = rnd.choice(queries)
                args = ["fetch", "--config", str(cfg), "--topic", TOPIC, "--partition", str(partition),
                        "--offset", str(offset), "--count", "5", "--format", "json"]
                res = subprocess.run([sys.executable, "-m", "rlm.cli", *args], cwd=ROOT, capture_output=True,
                                     timeout=120)
                assert res.returncode == 0, res.stderr.decode()[-2000:]
                lines = [json.loads(line) for line in res.stdout.decode().splitlines()]
                assert len(lines) == 5 and lines[0]["offset"] >= offset
                for rec in lines:
                    key, value = values[(partition, rec["offset"])]
                    assert base64.b64decode(rec["value"]) == value and base64.b64decode(rec["key"]) == key
        finally:
            done.set()
            for t in readers:
                t.join()
    finally:
        codes = [stop(p) for p in procs]
    texts = [log.read_text() for log in logs]
    assert failures == [], failures[:5]
    assert reads[0] > 4 * FETCH_RUNS
    assert codes == [0, 0], texts
    assert not [line for t in texts for line in t.splitlines() if "[error" in line or "Traceback" in line]
    cache = tmp_path / "shared" / DIR_NAME
    assert _index_bytes(cache) <= bound
    assert not [p.name for p in cache.iterdir() if p.suffix == ".tmp"]
