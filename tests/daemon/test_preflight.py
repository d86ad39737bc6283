"""Start-up preflight against real services (issue 10, item 2): ``rlm check`` and ``rlm run`` fail fast
with one line naming the setting, write nothing to the metadata topic first, and keep librdkafka's
own log lines off stderr.

Broker: the session's Kafka; storage: the session's SeaweedFS; unreachable endpoints are closed
ports on 127.0.0.1. Elapsed times are printed (``-s``), not asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from tests.daemon.helpers import s3_storage
from tests.services.proc import free_ports

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def rlm(*args: str, timeout: float = 180) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "rlm.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=timeout,
    )
    return res, time.monotonic() - t0


def config(tmp_path: Path, kafka: Any, storage: dict[str, Any], meta_topic: str, **extra: Any) -> Path:
    doc = {
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(tmp_path / "work"),
        "bootstrap_servers": kafka.bootstrap,
        "http": {"enabled": False},
        "storage": storage,
        "metadata": {
            "manager": "topic",
            "config": {
                "remote.log.metadata.topic.name": meta_topic,
                "remote.log.metadata.topic.num.partitions": 2,
                "remote.log.metadata.topic.replication.factor": 1,
            },
        },
        "storage_request_timeout_ms": 3000,
        "metadata_request_timeout_ms": 3000,
        **extra,
    }
    path = tmp_path / "rlm.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def topic_exists(bootstrap: str, topic: str) -> bool:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return topic in md.topics


def meta_topic() -> str:
    return f"__rlm_meta_{uuid.uuid4().hex[:10]}"


def test_check_prints_what_it_checked(
    kafka: Any, seaweedfs: Any, seaweedfs_bucket: str, tmp_path: Path
) -> None:
    topic = meta_topic()
    cfg = config(tmp_path, kafka, s3_storage(seaweedfs, seaweedfs_bucket), topic)
    res, took = rlm("check", "--config", str(cfg))
    print(f"rlm check (all ok) took {took:.1f}s")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    for name in ("log dirs", "node id", "storage read", "storage write", "kafka", "metadata topic"):
        assert any(ln.startswith("ok ") and f" {name} " in ln for ln in lines), res.stdout
    assert f"metadata topic {topic!r}: absent, creatable" in res.stdout
    assert any(ln.startswith("ok ") and " security:kafka " in ln for ln in lines), res.stdout
    assert lines[-1] == "9 passed, 0 failed"  # the work dir, 6 dependencies, the 2 read faces' security
    assert not topic_exists(kafka.bootstrap, topic), "a check must not create the metadata topic"
    listed = seaweedfs.boto3_client().list_objects_v2(Bucket=seaweedfs_bucket)
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert keys == [], f"the probe segment must be deleted again: {keys}"


def test_missing_bucket_fails_fast_and_writes_no_metadata(
    kafka: Any, seaweedfs: Any, tmp_path: Path
) -> None:
    topic = meta_topic()
    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    cfg = config(tmp_path, kafka, s3_storage(seaweedfs, bucket), topic)
    res, took = rlm("run", "--config", str(cfg))
    print(f"rlm run (missing bucket) exited {res.returncode} after {took:.1f}s")
    assert res.returncode == 3, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    print(last)
    assert last.startswith(f"rlm: error: preflight failed ({cfg}): storage.config.bucket = '{bucket}'"), last
    assert not topic_exists(kafka.bootstrap, topic), "nothing may reach the metadata topic first"
    check, _ = rlm("check", "--config", str(cfg))
    assert check.returncode == 1 and "FAIL  storage read" in check.stdout, check.stdout


def test_unreachable_storage_endpoint_names_the_endpoint(kafka: Any, tmp_path: Path) -> None:
    port = free_ports(1)[0]
    storage = {
        "plugin": "s3",
        "config": {
            "bucket": "b-unreachable", "endpoint_url": f"http://127.0.0.1:{port}", "region": "us-east-1",
            "path_style": True, "access_key_id": "k", "secret_access_key": "s",
        },
    }
    topic = meta_topic()
    cfg = config(tmp_path, kafka, storage, topic)
    res, took = rlm("run", "--once", "--config", str(cfg))
    print(f"rlm run --once (unreachable endpoint) exited {res.returncode} after {took:.1f}s")
    assert res.returncode == 3
    last = res.stderr.strip().splitlines()[-1]
    print(last)
    assert f"storage.config.endpoint_url = 'http://127.0.0.1:{port}'" in last, last
    assert not topic_exists(kafka.bootstrap, topic)


def test_unreachable_bootstrap_one_line_no_librdkafka_flood(tmp_path: Path, kafka: Any) -> None:
    port = free_ports(1)[0]
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(tmp_path / "work"),
        "bootstrap_servers": f"127.0.0.1:{port}",
        "metadata": {"manager": "topic", "config": {"remote.log.metadata.topic.num.partitions": 2}},
        "metadata_request_timeout_ms": 3000,
        "http": {"enabled": False},
    }))
    res, took = rlm("run", "--config", str(cfg))
    print(f"rlm run (unreachable bootstrap) exited {res.returncode} after {took:.1f}s")
    assert res.returncode == 3
    err = res.stderr.strip().splitlines()
    print(err[-1])
    want = f"rlm: error: preflight failed ({cfg}): bootstrap_servers = '127.0.0.1:{port}'"
    assert err[-1].startswith(want), err[-1]
    assert "no broker answered" in err[-1]
    assert not [ln for ln in err if ln.startswith("%")], "raw librdkafka lines on stderr"
    kafka_lines = [ln for ln in err if '"kafka_client_log"' in ln]
    assert len(kafka_lines) <= 10, f"librdkafka lines are rate-limited: {len(kafka_lines)}"
