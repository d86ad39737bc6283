"""Security: the broker's log dir is only read, Kafka client security settings reach every Kafka
connection, secrets never show, and every listener binds loopback unless configured otherwise.

The SASL tests share one extra broker (module scope) whose only client listener is
SASL_PLAINTEXT with SCRAM-SHA-512 credentials written at format time: a connection that ignored
the security settings could not reach it at all.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fetcher import RemoteFetcher
from fetcher.cluster_auth import BrokerLogin, LoginRefusedError
from fetcher.kafka import EndpointThread, ListenerSettings
from fetcher.kafka.forward import BrokerForwarder
from rlm.config import DaemonConfig, load_config
from rlm.log.partition import PartitionDir
from rlm.plugin_setup import load_rlmm, load_rsm
from rlm.types import IndexType, TopicIdPartition
from tests.daemon.helpers import (
    SEGMENT_BYTES,
    check_segment_against_local,
    create_topic,
    dir_digest,
    finished,
    produce,
    read_all,
    wait_for,
)
from tests.daemon.test_standalone import write_partition
from tests.faults.security_helpers import (
    read_only_bind_mount,
    rlm,
    spawn_rlm,
    stop_process,
    wait_listening,
)
from tests.services.kafka import KafkaCluster, SaslScram
from tests.services.s3 import ACCESS_KEY, MotoServer

pytestmark = [pytest.mark.faults]

SASL_USER, SASL_PASSWORD = "rlm-sidecar", "sasl-pw-7c41e9d2"
WRONG_PASSWORD = "wrong-sasl-pw-0b3f"
S3_SECRET = "s3-secret-5a90c1"
HTTP_TOKEN = "http-token-e62d7f"
SECRETS = (SASL_PASSWORD, WRONG_PASSWORD, S3_SECRET, HTTP_TOKEN)


@pytest.fixture(scope="module")
def sasl_kafka() -> Iterator[KafkaCluster]:
    """A broker reachable only over SASL_PLAINTEXT/SCRAM-SHA-512 (users: the broker's own, ours)."""
    cluster = KafkaCluster(
        nodes=1,
        name="kafka-sasl",
        sasl=SaslScram(users=(("admin", "admin-pw-1"), (SASL_USER, SASL_PASSWORD))),
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def sasl_client(kafka: KafkaCluster, password: str = SASL_PASSWORD) -> dict[str, str]:
    assert kafka.sasl is not None
    return kafka.sasl.client_config(SASL_USER, password)


def sasl_topic(kafka: KafkaCluster, topic: str, records: int) -> Path:
    """A topic on the SASL broker with ``records`` records (1 MiB segments: one rolled per ~4000)."""
    conf = {"bootstrap.servers": kafka.bootstrap, **sasl_client(kafka)}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": str(SEGMENT_BYTES)})])[topic].result(
        60
    )
    produce(kafka.bootstrap, topic, records, **sasl_client(kafka))
    pdir = kafka.log_dir / f"{topic}-0"
    wait_for("a segment rolled", lambda: len(PartitionDir(pdir).segments) >= 2)
    return pdir


def consume(bootstrap: str, topic: str, start: int, end: int) -> list[tuple[int, bytes, bytes]]:
    """Records ``[start, end)`` of partition 0 as (offset, key, value), read with a plain consumer."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sec-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    got: list[tuple[int, bytes, bytes]] = []
    try:
        c.assign([TopicPartition(topic, 0, start)])
        give_up = time.monotonic() + 60  # only so a broken endpoint fails instead of hanging
        while time.monotonic() < give_up and (not got or got[-1][0] < end - 1):
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.key() or b"", m.value() or b""))
    finally:
        c.close()
    return [g for g in got if g[0] < end]


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


# ---- 1. the log dir is only ever read ------------------------------------------------------------
@pytest.mark.kafka
@pytest.mark.slow
def test_tier_pass_from_a_read_only_mount_of_the_broker_log_dir(
    kafka: KafkaCluster, unique_topic: str, tmp_path: Path
) -> None:
    """A full tier pass (`rlm run --once`) reads a real broker's log dir through a read-only bind mount:
    every segment, index, producer snapshot and epoch entry is copied, `rlm verify --deep` passes and no
    byte of the broker's files changes.
    """
    topic = unique_topic
    create_topic(kafka.bootstrap, topic)
    produce(kafka.bootstrap, topic, 14000)
    src = kafka.log_dir / f"{topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(src).segments) >= 3)
    time.sleep(1.5)  # let the broker go idle (flushes, snapshots) before hashing its dir
    before = dir_digest(src)

    with read_only_bind_mount(kafka.log_dir, tmp_path / "ro-logs") as mounted:
        if isinstance(mounted, str):
            pytest.skip(mounted)
        probe = mounted / f"{topic}-0" / "rlm-write-probe"
        with pytest.raises(OSError):
            probe.write_bytes(b"x")  # the mount really is read-only
        work = tmp_path / "work"
        cfg_file = write_yaml(
            tmp_path / "rlm.yaml",
            {
                "log_dirs": [str(mounted)],
                "work_dir": str(work),
                "bootstrap_servers": kafka.bootstrap,
                "http": {"enabled": False},
                "topics": [{"pattern": topic, "remote.storage.enable": True}],
            },
        )
        ran = rlm("run", "--once", "--config", str(cfg_file))
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert "Read-only file system" not in ran.stderr
        verified = rlm("verify", "--config", str(cfg_file), "--deep", "--topic", topic)
        assert verified.returncode == 0, verified.stdout + verified.stderr

        cfg = load_config(cfg_file)
        pdir = PartitionDir(mounted / f"{topic}-0")
        tip = TopicIdPartition(pdir.topic_id, topic, 0)
        rsm, rlmm = load_rsm(cfg, 1), load_rlmm(cfg, 1, read_only=True)
        try:
            rlmm.on_partition_leadership_changes(set(), {tip})
            segs = finished(rlmm, tip)
            assert [m.start_offset for m in segs] == [s.base_offset for s in pdir.inactive_segments()]
            for m in segs:
                check_segment_against_local(rsm, m, pdir)  # .log, indexes, snapshot, epochs
                # the broker keeps only recent producer snapshots: older ones are rebuilt (in the work dir)
                assert read_all(rsm.fetch_index(m, IndexType.PRODUCER_SNAPSHOT))
        finally:
            rlmm.close()
            rsm.close()
    assert dir_digest(src) == before, "the daemon must never change the broker's files"


# ---- 2. Kafka client security settings reach every connection ----------------------------------
def sasl_config(
    kafka: KafkaCluster, topic: str, tmp: Path, password: str = SASL_PASSWORD, **extra: Any
) -> dict[str, Any]:
    """A daemon configuration whose only Kafka login is ``kafka_client`` (the topic metadata store
    inherits it with ``bootstrap_servers``)."""
    return {
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(tmp / "work"),
        "bootstrap_servers": kafka.bootstrap,
        "kafka_client": sasl_client(kafka, password),
        "metadata": {
            "manager": "topic",
            "config": {
                "remote.log.metadata.topic.num.partitions": 2,
                "remote.log.metadata.topic.replication.factor": 1,
            },
        },
        "storage": {"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
        "http": {"enabled": False},
        "read": {"kafka_port": 0},
        "metadata_request_timeout_ms": 5000,
        "topics": [{"pattern": topic, "remote.storage.enable": True}],
        **extra,
    }


@pytest.mark.kafka
@pytest.mark.slow
def test_sasl_settings_reach_every_kafka_connection(
    sasl_kafka: KafkaCluster, unique_topic: str, tmp_path: Path
) -> None:
    """Against a broker with only a SASL/SCRAM listener, a tier pass, `rlm check`, `rlm status`, a broker
    offset lookup, a remote fetch and the Kafka endpoint in merged mode all work with the configured
    login, and a wrong password fails fast with a clear error that does not print it.
    """
    topic = unique_topic
    with pytest.raises(KafkaException):  # no listener takes a client without the login
        AdminClient({"bootstrap.servers": sasl_kafka.bootstrap}).list_topics(timeout=3)
    src = sasl_topic(sasl_kafka, topic, 12000)
    cfg_file = write_yaml(tmp_path / "rlm.yaml", sasl_config(sasl_kafka, topic, tmp_path))

    ran = rlm("run", "--once", "--config", str(cfg_file))
    assert ran.returncode == 0, ran.stderr[-3000:]
    check = rlm("check", "--config", str(cfg_file), "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    status = rlm("status", "--config", str(cfg_file), "--json")
    assert status.returncode == 0, status.stderr
    part = json.loads(status.stdout)["partitions"][f"{topic}-0"]
    pdir = PartitionDir(src)
    last = pdir.inactive_segments()[-1]
    assert part["remote_end"] == pdir.next_segment(last).base_offset - 1  # type: ignore[union-attr]

    # the read side in one process (as `rlm serve` builds it): broker offsets past the remote end,
    # remote reads through the topic metadata store, and the Kafka endpoint in merged mode, which
    # forwards the live tail (not in remote storage) to the broker over its own SASL connections
    assert part["remote_end"] < 11995
    with RemoteFetcher.from_config(load_config(cfg_file)) as fetcher:
        latest = fetcher.offset_for_timestamp(topic, 0, -1)
        assert latest is not None and (latest.source, latest.offset) == ("broker", 12000), latest
        scanned = [
            o for b in fetcher.scan(topic, 0, start_offset=10, end_offset=13) for o in b["offset"].to_pylist()
        ]
        assert scanned == [10, 11, 12]
        settings = ListenerSettings(port=0, merged=True)
        with EndpointThread(fetcher, settings, tmp_path / "endpoint") as endpoint:
            tail = consume(endpoint.bootstrap, topic, 11995, 12000)
    assert tail == [(o, f"k{o}".encode(), bytes([65 + o % 26]) * 200) for o in range(11995, 12000)]
    wrong = BrokerLogin.from_client_config(sasl_client(sasl_kafka, WRONG_PASSWORD))
    with pytest.raises(LoginRefusedError) as refused_endpoint:  # the endpoint's own login, refused
        asyncio.run(BrokerForwarder(sasl_kafka.bootstrap, timeout_s=10, login=wrong).leader(topic, 0))
    assert "refused the login" in str(refused_endpoint.value) and WRONG_PASSWORD not in str(
        refused_endpoint.value
    )

    # a wrong password: a typed, readable failure within the request timeouts, password never shown
    bad_file = write_yaml(
        tmp_path / "bad.yaml", sasl_config(sasl_kafka, topic, tmp_path / "bad", WRONG_PASSWORD)
    )
    bad_check = rlm("check", "--config", str(bad_file), timeout=120)
    bad_run = rlm("run", "--once", "--config", str(bad_file), timeout=120)
    for res in (bad_check, bad_run):
        assert res.returncode == (1 if res is bad_check else 3)
        said = [line for line in (res.stdout + res.stderr).splitlines() if line.startswith(("FAIL", "rlm:"))]
        refused = [line for line in said if "the broker refused the login" in line]
        assert refused and "SASL authentication" in refused[0], res.stdout + res.stderr[-3000:]
        assert "Traceback" not in res.stderr
    printed = "".join(r.stdout + r.stderr for r in (ran, check, status, bad_check, bad_run))
    assert not [s for s in SECRETS if s in printed]


# ---- 3. secrets never appear -------------------------------------------------------------------
@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.slow
def test_no_output_of_any_command_holds_a_secret(
    sasl_kafka: KafkaCluster, moto_server: MotoServer, moto_bucket: str, unique_topic: str, tmp_path: Path
) -> None:
    """The daemon, `rlm status`, `rlm check`, /metrics, `rlm serve` with a bearer token, and failures
    (unreachable S3 with a secret key, a wrong SASL password, a wrong HTTP token) are run with debug
    logs, and no stdout, stderr, log file, status file, metrics text or HTTP error body holds the S3
    secret, the SASL password or the token.
    """
    topic = unique_topic
    sasl_topic(sasl_kafka, topic, 8000)
    s3 = {
        "plugin": "s3",
        "config": {
            "bucket": moto_bucket,
            "endpoint.url": moto_server.endpoint_url,
            "region": "us-east-1",
            "path.style": True,
            "access.key.id": ACCESS_KEY,
            "secret.access.key": S3_SECRET,
        },
    }
    token_file = tmp_path / "token"
    token_file.write_text(HTTP_TOKEN + "\n")
    doc = sasl_config(
        sasl_kafka,
        topic,
        tmp_path,
        storage=s3,
        log_level="debug",
        http={"enabled": True, "port": 0},
        read={"http_port": 0, "http_token_file": str(token_file)},
    )
    cfg_file = write_yaml(tmp_path / "rlm.yaml", doc)
    outputs: list[str] = []
    daemon_log, serve_log = tmp_path / "daemon.log", tmp_path / "serve.log"
    daemon = spawn_rlm("run", "--config", str(cfg_file), log=daemon_log)
    serve = spawn_rlm("serve", "--config", str(cfg_file), log=serve_log)
    try:
        (_, metrics_port), *_ = wait_listening(daemon, 1, daemon_log)
        (_, api_port), *_ = wait_listening(serve, 1, serve_log)
        status_file = tmp_path / "work" / "status.json"

        def tiered() -> bool:
            try:
                parts = json.loads(status_file.read_text()).get("partitions", {})
            except (OSError, ValueError):  # not written yet, or caught mid-replace
                return False
            return int(parts.get(f"{topic}-0", {}).get("remote_end", -1)) >= 0

        wait_for("the daemon tiered over SASL to S3", tiered, timeout=120, interval=0.5)
        status = rlm("status", "--config", str(cfg_file))
        assert status.returncode == 0 and f"{topic}" in status.stdout, status.stdout + status.stderr
        outputs += [status.stdout, status.stderr]
        outputs.append(
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        )
        outputs.append(
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/health", timeout=10).read().decode()
        )
        ok = rlm("check", "--config", str(cfg_file))
        assert ok.returncode == 0, ok.stdout + ok.stderr
        outputs += [ok.stdout, ok.stderr]

        base = f"http://127.0.0.1:{api_port}"
        url = f"{base}/v1/topics/{topic}/partitions/0/records?offset=0&max_bytes=1024"
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token"},
            {"Authorization": f"Bearer {HTTP_TOKEN}x"},
        ):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
            assert refused.value.code == 401
            outputs.append(refused.value.read().decode(errors="replace") + str(refused.value.headers))
        answers: list[str] = []

        def served() -> bool:  # a cold first read may answer 504 (retriable) while metadata catches up
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {HTTP_TOKEN}"})
            try:
                with urllib.request.urlopen(req, timeout=30) as good:
                    answers.append(good.read().decode(errors="replace"))
                    return True
            except urllib.error.HTTPError as e:
                assert e.code in (503, 504), e.code
                answers.append(e.read().decode(errors="replace"))
                return False

        wait_for("the read API served records with the token", served, timeout=60, interval=0.5)
        assert '"offset": 0' in answers[-1] or '"offset":0' in answers[-1], answers[-1][:500]
        outputs += answers
    finally:
        stop_process(daemon)
        stop_process(serve)

    # failures: storage unreachable (with the secret key configured) and a wrong SASL password
    unreachable = {**s3, "config": {**s3["config"], "endpoint.url": "http://127.0.0.1:9", "max_attempts": 1}}
    broken = {**doc, "storage": unreachable, "kafka_client": sasl_client(sasl_kafka, WRONG_PASSWORD)}
    broken_file = write_yaml(
        tmp_path / "broken.yaml",
        {**broken, "work_dir": str(tmp_path / "broken"), "storage_request_timeout_ms": 2000},
    )
    check = rlm("check", "--config", str(broken_file), timeout=120)
    failed = [line.split()[1] for line in check.stdout.splitlines() if line.startswith("FAIL")]
    assert check.returncode == 1 and {"storage", "kafka"} <= set(failed), check.stdout + check.stderr[-2000:]
    outputs += [check.stdout, check.stderr]  # (`rlm run` with a wrong password: the SASL test)

    outputs += [daemon_log.read_text(errors="replace"), serve_log.read_text(errors="replace")]
    outputs += [
        p.read_text(errors="replace")
        for p in tmp_path.rglob("*")
        if p.is_file()
        and p not in (cfg_file, token_file)
        and p.suffix != ".yaml"
        and p.stat().st_size < 10_000_000
    ]
    everything = "\n".join(outputs)
    assert '"event": "segment_copied"' in everything  # the debug log was really there to search
    leaks = [s for s in SECRETS if s in everything]
    assert not leaks, leaks


# ---- 4. listeners bind loopback by default -----------------------------------------------------
def test_every_listener_binds_loopback_by_default(tmp_path: Path) -> None:
    """The defaults of the daemon's /metrics + /health, `rlm serve`'s HTTP API and the Kafka-protocol
    endpoint are 127.0.0.1, and the running `rlm run`, `rlm serve` and `rlm kafka-serve` listen on
    nothing else.
    """
    defaults = DaemonConfig()
    assert (defaults.http.host, defaults.read.http_host, defaults.read.kafka_host) == ("127.0.0.1",) * 3

    logs = tmp_path / "logs"
    write_partition(logs, "loop", 0, 40)
    cfg_file = write_yaml(
        tmp_path / "rlm.yaml",
        {
            "log_dirs": [str(logs)],
            "work_dir": str(tmp_path / "work"),
            "topic_defaults": {"remote.storage.enable": True},
            "http": {"port": 0},
            "read": {"serve_http": True, "http_port": 0, "kafka_port": 0},
        },
    )
    # the daemon first: the read side opens the metadata store it creates
    expected = {"run": 2, "serve": 1, "kafka-serve": 1}  # rlm run: /metrics + the read API
    procs: dict[str, subprocess.Popen[bytes]] = {}
    bound: dict[str, list[tuple[str, int]]] = {}
    try:
        for name, count in expected.items():
            log = tmp_path / f"{name}.log"
            procs[name] = spawn_rlm(name, "--config", str(cfg_file), log=log)
            bound[name] = wait_listening(procs[name], count, log)
    finally:
        for proc in procs.values():
            stop_process(proc)
    assert all(addrs for addrs in bound.values()), bound
    assert {addr for addrs in bound.values() for addr, _ in addrs} == {"127.0.0.1"}, bound
