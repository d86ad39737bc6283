"""The read HTTP API over Aiven's layout: NDJSON pages walked with ``X-Next-Offset`` return what
the broker's consumer read, at both isolation levels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from fetcher.http.server import HttpApiServer
from rlm.config import load_config
from tests.aiven.helpers import VARIANTS, expected
from tests.aiven.test_read_faces import _TYPES, _partitions
from tests.fixtures.aiven.build import record_digest

NDJSON = "application/x-ndjson"


def _walk(base: str, topic: str, partition: int, level: str) -> list[dict[str, Any]]:
    seg = requests.get(f"{base}/v1/topics/{topic}/partitions/{partition}/segments", timeout=60).json()
    offset, end = seg["log_start_offset"], seg["log_end_offset"]
    rows: list[dict[str, Any]] = []
    while offset < end:
        r = requests.get(f"{base}/v1/topics/{topic}/partitions/{partition}/records",
                         params={"offset": offset, "max_bytes": 100_000, "isolation": level},
                         headers={"Accept": NDJSON}, timeout=60)
        assert r.status_code == 200, r.text
        for line in r.text.splitlines():
            o = json.loads(line)
            rows.append({"topic": topic, "partition": partition, "offset": o["offset"],
                         "timestamp": o["timestamp"], "timestamp_type": _TYPES[o["timestamp_type"]],
                         "leader_epoch": o["partition_leader_epoch"],
                         "digest": record_digest(o["key"], o["value"], o["headers"])})
        nxt = int(r.headers["X-Next-Offset"])
        assert nxt > offset
        offset = nxt
    return rows


@pytest.mark.parametrize("variant", VARIANTS)
def test_ndjson_pages_are_what_the_brokers_consumer_read(
        variant: str, aiven_configs: dict[str, Path], tmp_path: Path) -> None:
    cfg = load_config(aiven_configs[variant], read={"http_port": 0}, work_dir=str(tmp_path / "work"))
    server = HttpApiServer.from_config(cfg).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        for level in ("read_uncommitted", "read_committed"):
            got = [r for t, p in _partitions(variant) for r in _walk(base, t, p, level)]
            want = expected(variant, level)
            key = lambda r: (r["topic"], r["partition"], r["offset"])  # noqa: E731
            assert sorted(got, key=key) == sorted(want, key=key)
    finally:
        server.stop()
