"""Shared fixtures: one standalone tiered log dir (written by rlm.log, tiered by the daemon's
``--once`` to local storage + the file metadata store) and HTTP API servers over it on real
127.0.0.1 sockets (uvicorn in a thread of the test process)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from fetcher.http.server import HttpApiServer
from rlm.config import DaemonConfig, load_config
from rlm.types import KafkaUuid, TopicIdPartition
from tests.daemon.test_standalone import cfg_for, run_once, write_partition
from tests.fetcher_http.controlled_rsm import ControlledRSM

TOPIC = "events"
CONTROLLED = "tests.fetcher_http.controlled_rsm:ControlledRSM"
CONTROLLED_RLMM = "tests.fetcher_http.controlled_rlmm:ControlledFileRemoteLogMetadataManager"


@dataclass
class Tiered:
    logs: Path
    work: Path
    tips: list[TopicIdPartition]

    def config(self, work: Path, *, plugin: str = "local", manager: str = "file",
               **read: Any) -> DaemonConfig:
        """A read-side config over the tiered data, with its own work dir (index cache)."""
        return load_config(
            None, work_dir=str(work),
            storage={"plugin": plugin, "config": {"root": str(self.work / "remote")}},
            metadata={"manager": manager, "config": {"dir": str(self.work / "metadata")}},
            # a read's default timeout (500 ms, Kafka's remote.fetch.max.wait.ms) is a wall-clock
            # limit: on 2 cores shared with a CI run and benchmarks one page of a walk exceeded it
            # (a 504); tests of the timeout itself pass their own
            read={"http_port": 0, "fetch_max_wait_ms": 30_000, **read})


@pytest.fixture(scope="package")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Tiered:
    root = tmp_path_factory.mktemp("fetcher-http")
    logs = root / "logs"
    tid = KafkaUuid.random()
    tips = [write_partition(logs, TOPIC, 0, 300, topic_id=tid, epoch_change_at=150),
            write_partition(logs, TOPIC, 1, 120, topic_id=tid)]
    run_once(cfg_for(logs, root / "tier"))
    return Tiered(logs, root / "tier", tips)


class Api:
    """A running server and a requests session against it."""

    def __init__(self, server: HttpApiServer, token: str | None = None) -> None:
        self.server = server
        self.base = f"http://127.0.0.1:{server.port}"
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str, accept: str | None = None, **params: Any) -> requests.Response:
        headers = {"Accept": accept} if accept else {}
        return self.session.get(self.base + path, params=params, headers=headers, timeout=60)


@contextlib.contextmanager
def serving(config: DaemonConfig, token: str | None = None) -> Iterator[Api]:
    server = HttpApiServer.from_config(config).start()
    api = Api(server, token)
    try:
        yield api
    finally:
        ControlledRSM.reset()
        api.session.close()
        server.stop()


@pytest.fixture(scope="package")
def api(tiered: Tiered, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with serving(tiered.config(tmp_path_factory.mktemp("api-work"))) as a:
        yield a
