"""One standalone Spark cluster (master + 2 workers) for the whole ``tests/spark`` package.

Starting it is three JVMs; the cluster tests of several modules share it. Applications run one
after another (the suite is serial), and each application's executors end with it, so a test
sees an idle cluster. A test that wants a single executor asks for ``spark.cores.max=1``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.services.proc import RUN_DIR
from tests.services.spark_cluster import SparkCluster


@pytest.fixture(scope="package")
def spark_cluster() -> Iterator[SparkCluster]:
    c = SparkCluster(RUN_DIR / f"spark-cluster-{time.time_ns()}", workers=2).start()
    try:
        yield c
    finally:
        c.stop()
