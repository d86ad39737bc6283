"""The contract kit against the ``s3`` plugin on two real S3 servers: SeaweedFS and moto (server mode).

Multipart is exercised with 5 MiB parts (the S3 minimum) and a 6 MiB threshold, so the kit's 12 MiB
segment is uploaded in 3 parts and read back as several parallel 1 MiB range requests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import rsm_plugins
from rsm_plugins.api import RemoteStorageManager
from rsm_plugins.testing import RemoteStorageManagerContract
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Endpoint

pytestmark = [pytest.mark.s3, pytest.mark.slow]

MiB = 1 << 20


def s3_config(server: S3Endpoint, bucket: str, **overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "bucket": bucket,
        "prefix": "tiered/",
        "endpoint_url": server.endpoint_url,
        "region": REGION,
        "path_style": True,
        "access_key_id": ACCESS_KEY,
        "secret_access_key": SECRET_KEY,
        "multipart_threshold": 6 * MiB,
        "part_size": 5 * MiB,
        "upload_concurrency": 3,
        "fetch_chunk_size": MiB,
        "fetch_concurrency": 3,
        "max_attempts": 3,
        "broker.id": 0,
    }
    cfg.update(overrides)
    return cfg


@contextlib.contextmanager
def shared_bucket(server: S3Endpoint, name: str) -> Iterator[str]:
    """One bucket for a whole test class (creating buckets is slow on SeaweedFS); the kit gives every
    segment a fresh random topic id, so tests never see each other's keys."""
    bucket = server.create_bucket(name)
    try:
        yield bucket
    finally:
        server.delete_bucket(bucket)


@pytest.fixture(scope="module")
def seaweedfs_contract_bucket(seaweedfs: S3Endpoint) -> Iterator[str]:
    with shared_bucket(seaweedfs, "contract") as b:
        yield b


@pytest.fixture(scope="module")
def moto_contract_bucket(moto_server: S3Endpoint) -> Iterator[str]:
    with shared_bucket(moto_server, "contract") as b:
        yield b


class TestS3ContractSeaweedFS(RemoteStorageManagerContract):
    @pytest.fixture
    def rsm(self, seaweedfs: S3Endpoint, seaweedfs_contract_bucket: str) -> Iterator[RemoteStorageManager]:
        plugin = rsm_plugins.load("s3", s3_config(seaweedfs, seaweedfs_contract_bucket))
        yield plugin
        plugin.close()


class TestS3ContractMoto(RemoteStorageManagerContract):
    @pytest.fixture
    def rsm(self, moto_server: S3Endpoint, moto_contract_bucket: str) -> Iterator[RemoteStorageManager]:
        plugin = rsm_plugins.load("s3", s3_config(moto_server, moto_contract_bucket))
        yield plugin
        plugin.close()
