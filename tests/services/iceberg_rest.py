"""Apache Iceberg's own REST catalog server, for ``rlm iceberg`` against a REST catalog.

``org.apache.iceberg.rest.RESTCatalogServer`` is the main class of the ``iceberg-open-api``
test-fixtures jar on Maven Central (the code of Iceberg's REST fixture image); its jars come from
``deploy/local/iceberg-rest/pom.xml`` (``fetch-jars.sh iceberg-rest``). It serves a JdbcCatalog on a
SQLite file, configured the way the fixture image is: ``CATALOG_*`` variables become catalog
properties (``_`` -> ``.``, ``__`` -> ``-``). The warehouse is on S3 (SeaweedFS): the server writes
the tables' metadata files there with Iceberg's S3FileIO, the clients (PyIceberg, Spark) write data
files and manifests there with their own. The server listens on all interfaces (its port is its
only setting); the tests reach it on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

from tests.services.proc import (
    RUN_DIR,
    ServiceError,
    ensure_jars,
    free_port,
    java,
    spawn,
    stop,
    wait_until,
)
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Endpoint


class IcebergRestCatalog:
    """One REST catalog server; ``properties`` is the PyIceberg catalog configuration for it."""

    def __init__(self, s3: S3Endpoint, bucket: str, base: Path | None = None) -> None:
        self.s3 = s3
        self.bucket = bucket
        self.warehouse = f"s3://{bucket}/rest"
        self.port = free_port()
        self.base = base or RUN_DIR / f"iceberg-rest-{os.getpid()}-{self.port}"
        self.log = self.base / "server.log"
        self.proc: Any = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def properties(self) -> dict[str, str]:
        """``pyiceberg.catalog.load_catalog`` properties: the REST uri and the clients' S3 settings."""
        return {"type": "rest", "uri": self.uri, "warehouse": self.warehouse,
                "s3.endpoint": self.s3.endpoint_url, "s3.access-key-id": ACCESS_KEY,
                "s3.secret-access-key": SECRET_KEY, "s3.region": REGION,
                "s3.path-style-access": "true"}

    def start(self, timeout: float = 90.0) -> IcebergRestCatalog:
        lib = ensure_jars("iceberg-rest")
        self.base.mkdir(parents=True, exist_ok=True)
        env = {**os.environ,
               "CATALOG_REST_PORT": str(self.port),
               "CATALOG_URI": f"jdbc:sqlite:file:{self.base / 'catalog.db'}",
               "CATALOG_JDBC_USER": "rlm", "CATALOG_JDBC_PASSWORD": "rlm",
               "CATALOG_WAREHOUSE": self.warehouse,
               "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
               "CATALOG_S3_ENDPOINT": self.s3.endpoint_url,
               "CATALOG_S3_PATH__STYLE__ACCESS": "true",
               "CATALOG_S3_ACCESS__KEY__ID": ACCESS_KEY,
               "CATALOG_S3_SECRET__ACCESS__KEY": SECRET_KEY,
               "CATALOG_CLIENT_REGION": REGION,
               "CATALOG_HTTP__CLIENT_TYPE": "urlconnection",
               # SeaweedFS (no IAM) refuses the SDK's streaming-signed (aws-chunked) uploads and
               # their checksum trailers: plain signed PUTs, checksums only where required
               "CATALOG_S3_CHUNKED__ENCODING__ENABLED": "false",
               "AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",
               "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED",
               "AWS_REGION": REGION}
        self.proc = spawn([java(), "-Xmx256m", "-Djava.net.preferIPv4Stack=true", "-cp", f"{lib}/*",
                           "org.apache.iceberg.rest.RESTCatalogServer"], log=self.log, env=env, cwd=self.base)
        wait_until("the Iceberg REST catalog answers /v1/config", lambda: "defaults" in self.config(),
                   timeout=timeout, proc=self.proc, log=self.log)
        return self

    def config(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2) as r:
            return dict(json.loads(r.read()))

    def stop(self) -> None:
        stop(self.proc, grace=15)
        self.proc = None

    def __enter__(self) -> IcebergRestCatalog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["IcebergRestCatalog", "ServiceError"]
