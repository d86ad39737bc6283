"""Kafka's Java console consumer (client properties file) and kafka-python through the endpoint
over SASL_SSL: record for record what the broker's ACLs let the principal read."""

from __future__ import annotations

import time

import pytest

from tests.security.conftest import PASSWORDS, Secured
from tests.services.kafka import run_tool

pytestmark = [pytest.mark.security, pytest.mark.kafka]


def test_java_console_consumer_over_sasl_ssl(secured: Secured) -> None:
    b = secured.topics["B"]
    want = [(o, k) for o, k, _ in secured.before["B"]]
    props = secured.tmp / "bob-client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="bob" password="{PASSWORDS["bob"]}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secured.ca.path}\n"
    )
    try:
        res = run_tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "--bootstrap-server",
            secured.bootstrap,
            "--consumer.config",
            str(props),
            "--topic",
            b,
            "--group",
            "bob-console",
            "--from-beginning",
            "--max-messages",
            str(len(want)),
            "--timeout-ms",
            "60000",
            "--property",
            "print.key=true",
            "--property",
            "print.offset=true",
            "--property",
            "print.value=false",
            timeout=240,
        )
    finally:
        props.unlink()  # it holds a password: not left for the file scan
    assert res.returncode == 0, res.stderr[-3000:]
    got = []
    for line in res.stdout.splitlines():  # Offset:O<TAB>key
        off, key = line.split("\t")
        got.append((int(off.split(":")[1]), key.encode()))
    assert got == want


def test_kafka_python_over_sasl_ssl(secured: Secured) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    a = secured.topics["A"]
    want = [(o, k, v) for o, k, v in secured.before["A"]]
    c = KafkaConsumer(
        bootstrap_servers=secured.bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORDS["alice"],
        ssl_cafile=str(secured.ca.path),
        group_id=None,
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    try:
        tp = KTP(a, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got: list[tuple[int, bytes, bytes]] = []
        give_up = time.monotonic() + 120  # only so a broken endpoint fails instead of hanging
        while (not got or got[-1][0] < want[-1][0]) and time.monotonic() < give_up:
            for recs in c.poll(timeout_ms=1000).values():
                got += [(r.offset, r.key, r.value) for r in recs if r.offset <= want[-1][0]]
    finally:
        c.close()
    assert got == want
