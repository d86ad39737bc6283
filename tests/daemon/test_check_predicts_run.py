"""``rlm check`` predicts ``rlm run`` (issue 39, item 2): every way ``rlm run`` refuses to start
from a configuration is reported by ``rlm check`` first, naming the same setting.

The refusals, from ``rlm/commands/run.py`` and ``Daemon.start`` (in order):

- the configuration does not load (``load_config``: unknown key, bad value)      -> exit 3 both
- ``InstanceLock``: the work dir cannot hold the lock file (a file in its place, read-only)
- the preflight (``rlm/daemon/preflight.py``): log dirs, node id, storage plugin / read / write
  (missing bucket; refused credentials are named too, but the test stores accept any key), the
  cluster, the metadata store (topic partition count,
  replication factor against the live brokers, ``topic.create`` false, compacted topic; the file
  store's directory)
- ``load_rlmm`` creating the metadata topic (what the validate-only CreateTopics of the check
  now sends the very same request for)
- the metrics/health HTTP server cannot bind ``http.host:http.port`` (``rlm run`` without --once)

Each case runs ``rlm check`` and ``rlm run`` on the same configuration: run must refuse (exit 3),
check must fail (exit 1) with a FAIL line naming the setting run's error names. The cases without
a broker use the file metadata store and the local storage plugin; the broker cases use the
session's Kafka (one broker) and SeaweedFS.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]
from confluent_kafka.cimpl import NewTopic

from tests.daemon.helpers import s3_storage
from tests.daemon.test_preflight import config as broker_config
from tests.daemon.test_preflight import meta_topic, rlm, topic_exists


def standalone(tmp_path: Path, **over: Any) -> Path:
    """A standalone configuration that `rlm run --once` accepts; ``over`` replaces top-level keys."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    doc: dict[str, Any] = {
        "log_dirs": [str(logs)],
        "node_id": 1,
        "work_dir": str(tmp_path / "work"),
        "http": {"enabled": False},
        "log_format": "json",
        "storage": {"plugin": "local", "config": {"root": str(tmp_path / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(tmp_path / "meta")}},
    }
    doc.update(over)
    doc = {k: v for k, v in doc.items() if v is not None}
    path = tmp_path / "rlm.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


Done = subprocess.CompletedProcess[str]


def both(cfg: Path, *, once: bool = True) -> tuple[Done, Done]:
    check, _ = rlm("check", "--config", str(cfg))
    run, _ = rlm("run", "--config", str(cfg), *(("--once",) if once else ()), timeout=120)
    return check, run


def assert_predicted(cfg: Path, setting: str, *, once: bool = True) -> str:
    """run refuses with exit 3 naming ``setting``; check fails on a line naming it; returns that line."""
    check, run = both(cfg, once=once)
    last = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ""
    assert run.returncode == 3, (run.returncode, run.stderr[-2000:])
    assert last.startswith("rlm: error:") and setting in last, last
    assert "Traceback" not in run.stderr + check.stderr
    assert check.returncode == 1, check.stdout + check.stderr
    failed = [ln for ln in check.stdout.splitlines() if ln.startswith("FAIL") and setting in ln]
    assert failed, f"rlm check did not report {setting!r}:\n{check.stdout}"
    return failed[0]


def test_the_baseline_configuration_passes_both(tmp_path: Path) -> None:
    check, run = both(standalone(tmp_path))
    assert check.returncode == 0, check.stdout + check.stderr
    assert run.returncode == 0, run.stderr[-2000:]


def test_invalid_configuration(tmp_path: Path) -> None:
    cfg = standalone(tmp_path, no_such_setting=1)
    check, run = both(cfg)
    assert check.returncode == run.returncode == 3
    assert "no_such_setting" in check.stderr and "no_such_setting" in run.stderr


def test_work_dir_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "work").write_text("not a directory")
    line = assert_predicted(standalone(tmp_path), "work_dir")
    assert "a file is where a directory is expected" in line, line


def test_missing_log_dir(tmp_path: Path) -> None:
    assert_predicted(standalone(tmp_path, log_dirs=[str(tmp_path / "nope")]), "log_dirs")


def test_node_id_unknown(tmp_path: Path) -> None:
    assert_predicted(standalone(tmp_path, node_id=None), "node_id")


def test_unknown_storage_plugin(tmp_path: Path) -> None:
    assert_predicted(standalone(tmp_path, storage={"plugin": "no-such-plugin", "config": {}}), "storage")


def test_storage_root_unusable(tmp_path: Path) -> None:
    (tmp_path / "remote").write_text("a file where the storage root belongs")
    assert_predicted(standalone(tmp_path), "storage")


def test_file_metadata_dir_unusable(tmp_path: Path) -> None:
    (tmp_path / "meta").write_text("a file where the metadata store belongs")
    assert_predicted(standalone(tmp_path), "metadata.config.dir")


def test_http_port_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = standalone(tmp_path, http={"enabled": True, "host": "127.0.0.1", "port": port})
        line = assert_predicted(cfg, "http.host/http.port", once=False)
    assert f"127.0.0.1:{port}" in line and "EADDRINUSE" in line, line


# ---- with the broker ------------------------------------------------------------------------------
@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.slow
def test_replication_factor_above_live_brokers(kafka: Any, seaweedfs: Any, seaweedfs_bucket: str,
                                               tmp_path: Path) -> None:
    """The issue's case: check said "absent, creatable", then run failed on replication factor 3."""
    topic = meta_topic()
    cfg = broker_config(tmp_path, kafka, s3_storage(seaweedfs, seaweedfs_bucket), topic)
    doc = yaml.safe_load(cfg.read_text())
    doc["metadata"]["config"]["remote.log.metadata.topic.replication.factor"] = 3
    cfg.write_text(yaml.safe_dump(doc))
    line = assert_predicted(cfg, f"metadata topic {topic!r}")
    assert "replication factor 3" in line and "1 live broker" in line, line
    assert not topic_exists(kafka.bootstrap, topic)


@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.slow
def test_check_sends_the_daemons_create_request(kafka: Any, seaweedfs: Any, seaweedfs_bucket: str,
                                                tmp_path: Path) -> None:
    """What check says it would create is what run creates: partitions, replication factor, configs."""
    topic = meta_topic()
    cfg = broker_config(tmp_path, kafka, s3_storage(seaweedfs, seaweedfs_bucket), topic)
    check, run = both(cfg)
    assert check.returncode == 0 and run.returncode == 0, check.stdout + run.stderr[-2000:]
    said = next(ln for ln in check.stdout.splitlines() if "absent, creatable" in ln)
    assert "2 partitions, replication factor 1 of 1 live broker(s)" in said, said
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic)
    actual = {k: v.value for k, v in admin.describe_configs([res])[res].result(timeout=30).items()}
    for kv in ("cleanup.policy=delete", "remote.storage.enable=false", "retention.ms=-1"):
        k, v = kv.split("=")
        assert kv in said and actual[k] == v, (kv, said, actual[k])
    again, _ = rlm("check", "--config", str(cfg))
    assert again.returncode == 0 and "present (2 partitions)" in again.stdout, again.stdout


@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.parametrize("case", ["partitions", "compacted", "create_false"])
def test_metadata_topic_refusals(case: str, kafka: Any, seaweedfs: Any, seaweedfs_bucket: str,
                                 tmp_path: Path) -> None:
    topic = meta_topic()
    cfg = broker_config(tmp_path, kafka, s3_storage(seaweedfs, seaweedfs_bucket), topic)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    if case == "create_false":
        doc = yaml.safe_load(cfg.read_text())
        doc["metadata"]["config"]["remote.log.metadata.topic.create"] = False
        cfg.write_text(yaml.safe_dump(doc))
        want = "remote.log.metadata.topic.create is false"
    else:
        conf = {"cleanup.policy": "compact"} if case == "compacted" else {}
        parts = 2 if case == "compacted" else 3
        admin.create_topics([NewTopic(topic, parts, 1, config=conf)])[topic].result(timeout=30)
        want = "cleanup.policy=compact" if case == "compacted" else "has 3 partitions, configured 2"
    check, run = both(cfg)
    assert check.returncode == 1 and want in check.stdout, check.stdout
    if case == "compacted":
        # run itself does not look at the configs: its first metadata write is refused by the broker;
        # check says so before anything is tiered
        return
    assert run.returncode == 3 and f"{topic!r}" in run.stderr.strip().splitlines()[-1], run.stderr[-2000:]


@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.slow
def test_missing_bucket_names_the_command_that_creates_it(kafka: Any, seaweedfs: Any, tmp_path: Path) -> None:
    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    cfg = broker_config(tmp_path, kafka, s3_storage(seaweedfs, bucket), meta_topic())
    line = assert_predicted(cfg, "storage.config.bucket")
    assert f"aws s3 mb s3://{bucket} --endpoint-url {seaweedfs.endpoint_url}" in line, line


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
