"""One broker per Kafka version per session, for the version compatibility suite.

``compat_kafka`` is parameterized over :data:`BROKERS` (version, mode). pytest groups the tests of
a session-scoped parameter together, so each broker starts once, serves every test of its
version, and is stopped before the next version's starts (two cores: never two brokers at once).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services.kafka import DEFAULT_VERSION, KafkaCluster

# (version, zookeeper): 2.8 is ZooKeeper only; 3.5 and 3.9 run in KRaft here (3.5's ZooKeeper mode
# is started by the services too, and checked by the smoke test); the default broker is KRaft 4.1.1
BROKERS: list[tuple[str, bool]] = [
    ("2.8.2", True),
    ("3.5.2", False),
    ("3.9.2", False),
    (DEFAULT_VERSION, False),
    ("4.4.0", False),
]


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def broker_id(param: tuple[str, bool]) -> str:
    version, zk = param
    return f"{version}-{'zk' if zk else 'kraft'}"


@pytest.fixture(scope="session", params=BROKERS, ids=broker_id)
def compat_kafka(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    version, zk = request.param
    cluster = KafkaCluster(nodes=1, name=f"compat-{broker_id(request.param)}", version=version, zookeeper=zk)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
