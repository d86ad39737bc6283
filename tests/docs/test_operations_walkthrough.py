"""docs/operations.md's shell blocks run as written against a real broker and SeaweedFS (issue 39,
item 6, and its first test): the operator's path (bucket, configuration, ``rlm check``, one pass of
``rlm run``, ``rlm status``, then ``rlm fetch``, ``rlm offsets`` and ``rlm verify``), with the
metadata topic at Kafka's default 50 partitions, as the page configures it. Then each read runs
again, cold (a new process each time), several times, and must answer the same: the issue's
regression was every cold read failing after ~27 s with a 50-partition metadata topic.

What the test fills in is what the page leaves to the reader, in the shell variables it
introduces (``BOOTSTRAP``, ``LOG_DIR``, ``WORK_DIR``, ``BUCKET``, ``REGION``, ``TOPIC``,
``AWS_ENDPOINT_URL``) and the AWS credential variables. One more: the metadata topic gets a name of
this test's own through ``RLM_METADATA__CONFIG`` (a documented override that merges key by key),
because the session's broker is shared and other tests create ``__remote_log_metadata`` with 3
partitions; the partition count and every other setting stay the page's defaults.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.daemon.helpers import create_topic
from tests.docs.shell_blocks import ShellBlock, shell_blocks
from tests.services.kafka import KafkaCluster
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY, SeaweedFS

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"
VENV_BIN = Path(sys.executable).parent
KAFKA_DEFAULT_METADATA_PARTITIONS = 50  # what the page's configuration creates
COLD_RUNS = 3

# The data: one partition, values of ~1 KB so that 1 MiB segments roll twice. The first OLD records
# are stamped 3 hours ago, the rest now: `--timestamp 2h-ago` must answer offset OLD.
RECORDS = 2600
OLD = 1200
VALUE_BYTES = 1000


def _value(i: int) -> bytes:
    head = json.dumps({"order": i}).encode()
    return head + b" " * (VALUE_BYTES - len(head))


def _produce(bootstrap: str, topic: str) -> None:
    now = int(time.time() * 1000)
    old = now - 3 * 3600 * 1000
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                  "batch.size": 16384})
    for i in range(RECORDS):
        ts = old + i if i < OLD else now + i
        p.produce(topic, key=f"order-{i}".encode(), value=_value(i), partition=0, timestamp=ts)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


@dataclass
class Walk:
    """The services, names and environment one walkthrough runs with."""

    kafka: KafkaCluster
    seaweedfs: SeaweedFS
    shell_dir: Path
    env: dict[str, str]
    topic: str
    bucket: str
    metadata_topic: str

    def run(self, block: ShellBlock) -> subprocess.CompletedProcess[str]:
        """The block in a new shell that stops at its first failing command, as a reader's would
        show the failure."""
        return subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=self.shell_dir,
                              env=self.env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def walk(kafka: KafkaCluster, seaweedfs: SeaweedFS, tmp_path: Path) -> Iterator[Walk]:
    tag = uuid.uuid4().hex[:10]
    topic, bucket, metadata_topic = f"orders-{tag}", f"docs-walkthrough-{tag}", f"__rlm_docs_{tag}"
    create_topic(kafka.bootstrap, topic)
    _produce(kafka.bootstrap, topic)
    shell_dir = tmp_path / "shell"
    shell_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("RLM_", "AWS_"))}
    env.update({
        "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",  # what `. .venv/bin/activate` does
        "BOOTSTRAP": kafka.bootstrap, "LOG_DIR": str(kafka.log_dir),
        "WORK_DIR": str(tmp_path / "work"), "BUCKET": bucket, "REGION": REGION, "TOPIC": topic,
        "AWS_ENDPOINT_URL": seaweedfs.endpoint_url, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),  # nobody's profile changes the answers
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
        "RLM_METADATA__CONFIG": json.dumps({"remote.log.metadata.topic.name": metadata_topic}),
    })
    if shutil.which("aws", path=env["PATH"]) is None:
        why = "the walkthrough creates its bucket with the AWS CLI, not installed (pip install awscli)"
        if os.environ.get("CI"):  # never a silent skip in CI: the docs' walkthrough is the test
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield Walk(kafka, seaweedfs, shell_dir, env, topic, bucket, metadata_topic)
    finally:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for t in (topic, metadata_topic):
            try:
                admin.delete_topics([t])[t].result(60)
            except Exception as e:  # the metadata topic is absent when the walk failed early
                print(f"cleanup: topic {t}: {e}")
        try:
            seaweedfs.delete_bucket(bucket)
        except Exception as e:  # absent when the walk failed before `aws s3 mb`
            print(f"cleanup: bucket {bucket}: {e}")


# ---- what each block must answer, by the command it starts with -------------------------------
def _check_bucket(walk: Walk, res: subprocess.CompletedProcess[str]) -> None:
    walk.seaweedfs.boto3_client().head_bucket(Bucket=walk.bucket)


def _check_config(walk: Walk, res: subprocess.CompletedProcess[str]) -> None:
    text = (walk.shell_dir / "rlm.yaml").read_text()
    assert f"pattern: \"{walk.topic}\"" in text and walk.env["LOG_DIR"] in text, text


def _check_check(walk: Walk, res: subprocess.CompletedProcess[str]) -> None:
    assert "FAIL" not in res.stdout and " 0 failed" in res.stdout, res.stdout


def _check_run_status(walk: Walk, res: subprocess.CompletedProcess[str]) -> None:
    md = AdminClient({"bootstrap.servers": walk.kafka.bootstrap}).list_topics(walk.metadata_topic, timeout=30)
    parts = md.topics[walk.metadata_topic].partitions
    assert len(parts) == KAFKA_DEFAULT_METADATA_PARTITIONS, "the page's metadata topic: Kafka's default"
    assert any(ln.split()[:1] == [f"{walk.topic}-0"] for ln in res.stdout.splitlines()), res.stdout
    status = json.loads(_rlm(walk, "status", "--config", "rlm.yaml", "--json").stdout)
    p0 = next(p for p in status["partitions"].values() if p["topic"] == walk.topic and p["partition"] == 0)
    assert p0["remote_segments"] >= 2 and p0["ranges"]["remote"][0] == 0, p0
    assert p0["ranges"]["remote"][1] > OLD, f"offset {OLD} must be tiered for the offsets block: {p0}"


def _check_fetch(walk: Walk, res: subprocess.CompletedProcess[str]) -> None:
    got = [json.loads(ln) for ln in res.stdout.splitlines()]
    assert [r["offset"] for r in got] == [0, 1, 2], res.stdout
    for r in got:
        i = r["offset"]
        assert base64.b64decode(r["key"]) == f"order-{i}".encode()
        assert base64.b64decode(r["value"]) == _value(i)


def _check_offsets(walk: Walk, res: subprocess.CompletedProcess[str]) -> None:
    rows = [ln.split() for ln in res.stdout.splitlines()]
    assert rows[0][:3] == ["TOPIC", "PARTITION", "OFFSET"] and rows[0][-1] == "SOURCE", res.stdout
    answers = [(r[0], r[1], r[2], r[-1]) for r in rows[1:]]
    assert answers == [(walk.topic, "0", str(OLD), "remote")], res.stdout


def _check_verify(walk: Walk, res: subprocess.CompletedProcess[str]) -> None:
    assert walk.topic in res.stdout, res.stdout  # it looked at the partition, and found it clean (exit 0)


Check = Callable[[Walk, subprocess.CompletedProcess[str]], None]
#: first command of a block -> what its answer must be; a block of the walkthrough not listed here
#: still runs and must exit 0
CHECKS: dict[str, Check] = {
    "aws s3 mb": _check_bucket,
    "cat > rlm.yaml": _check_config,
    "rlm check": _check_check,
    "rlm run": _check_run_status,
    "rlm fetch": _check_fetch,
    "rlm offsets": _check_offsets,
    "rlm verify": _check_verify,
}
#: the reads, run again cold (a new process each time)
COLD_READS = ("rlm fetch", "rlm offsets", "rlm verify")


def _check_of(block: ShellBlock) -> tuple[str, Check] | None:
    first = block.commands()[0]
    return next(((k, c) for k, c in CHECKS.items() if first.startswith(k)), None)


def _rlm(walk: Walk, *args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["rlm", *args], cwd=walk.shell_dir, env=walk.env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, (args, res.stdout[-2000:], res.stderr[-2000:])
    return res


def _outcome(block: ShellBlock, res: subprocess.CompletedProcess[str]) -> str:
    return (f"{block.where} exited {res.returncode}:\n{block.text}\n--- stdout\n{res.stdout[-3000:]}"
            f"\n--- stderr\n{res.stderr[-3000:]}")


def test_every_shell_block_runs_or_says_why_not() -> None:
    blocks = shell_blocks(DOC)
    run = [b for b in blocks if b.not_run is None]
    assert run, "the walkthrough's blocks are gone"
    assert all(b.section.startswith("Walkthrough") for b in run), [b.where for b in run]
    # every check and cold read the test makes is of a block the page has
    firsts = {k for b in run if (kc := _check_of(b)) is not None for k in (kc[0],)}
    assert firsts == set(CHECKS), f"blocks the test expects but the page lacks: {set(CHECKS) - firsts}"


def test_walkthrough_runs_as_written(walk: Walk) -> None:
    blocks = [b for b in shell_blocks(DOC) if b.not_run is None]
    cold: list[tuple[ShellBlock, Check]] = []
    started = time.monotonic()
    for block in blocks:
        t0 = time.monotonic()
        res = walk.run(block)
        print(f"{block.where} {block.commands()[0][:60]!r}: exit {res.returncode} in "
              f"{time.monotonic() - t0:.1f}s")
        assert res.returncode == 0, _outcome(block, res)
        kc = _check_of(block)
        if kc is not None:
            kc[1](walk, res)
            if kc[0] in COLD_READS:
                cold.append((block, kc[1]))
    assert {b.commands()[0].split()[1] for b, _ in cold} == {c.split()[1] for c in COLD_READS}
    for n in range(COLD_RUNS):
        for block, check in cold:
            t0 = time.monotonic()
            res = walk.run(block)
            print(f"cold #{n + 1} {block.commands()[0][:60]!r}: exit {res.returncode} in "
                  f"{time.monotonic() - t0:.1f}s")
            assert res.returncode == 0, _outcome(block, res)
            check(walk, res)
    print(f"walkthrough and {COLD_RUNS} cold rounds in {time.monotonic() - started:.1f}s")
