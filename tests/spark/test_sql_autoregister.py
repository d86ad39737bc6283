"""``kafka-tiered`` without glue: PySpark >= 4 registers it from the installed ``pyspark_kafka_tiered``.

No test here calls ``fetcher.spark.register``: a fresh driver process reads through the DataFrame
API and ``CREATE TEMPORARY VIEW ... USING``; ``spark-sql -e`` runs the same SQL against the
standalone cluster. The project is installed from its wheel (an editable install is invisible to
PySpark's ``pkgutil`` lookup), first on PYTHONPATH as in a user's environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services.proc import RUN_DIR
from tests.services.spark_cluster import SparkCluster, spark_home
from tests.spark.helpers import expected_rows, tier
from tests.wheel import build_wheel, install_target

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    return install_target(build_wheel(tmp / "dist"), tmp / "site")


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    root = tmp_path_factory.mktemp("sql-tiered")
    cfg = tier(root, [("sqltopic", 0, 60)], seg_bytes=16 * 1024)
    return cfg, "sqltopic", len(expected_rows(root / "logs", "sqltopic", 0))


def _env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env.update(PYTHONPATH=str(site), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return env


def test_the_wheel_installs_the_lookup_module(installed: Path) -> None:
    mod = installed / "pyspark_kafka_tiered" / "__init__.py"
    assert mod.read_text() == (installed / "fetcher/spark/autoregister/__init__.py").read_text()
    r = subprocess.run([sys.executable, "-c", "import pkgutil, pyspark_kafka_tiered as m; "
                        "print([i.name for i in pkgutil.iter_modules() if i.name.startswith('pyspark_')], "
                        "m.DefaultSource.name())"], capture_output=True, text=True, env=_env(installed),
                       cwd=installed, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['pyspark_kafka_tiered']", "kafka-tiered"]


def test_fresh_session_reads_without_register(installed: Path, tiered: tuple[Path, str, int],
                                              tmp_path: Path) -> None:
    cfg, topic, n = tiered
    r = subprocess.run([sys.executable, str(HERE / "sql_driver.py"), "--config", str(cfg), "--topic", topic],
                       capture_output=True, text=True, env=_env(installed), cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert n > 100
    assert got["dataframe"] == got["sql"] == n
    # bad input: a misspelt option fails the query and names the option
    assert got["typo_error"] is not None and "'subscrbe': unknown option" in got["typo_error"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkCluster]:
    c = SparkCluster(RUN_DIR / f"spark-sql-cluster-{time.time_ns()}", workers=1).start()
    try:
        yield c
    finally:
        c.stop()


def test_spark_sql_cli_on_the_cluster(installed: Path, tiered: tuple[Path, str, int], cluster: SparkCluster,
                                      tmp_path: Path) -> None:
    cfg, topic, n = tiered
    sql = (f"CREATE TEMPORARY VIEW v USING `kafka-tiered` "
           f"OPTIONS (`rlm.config` '{cfg}', subscribe '{topic}');"
           f" SELECT 'rows', count(*), count(DISTINCT offset) FROM v;")
    cmd = [str(spark_home() / "bin" / "spark-sql"), "--master", cluster.url,
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.executor.memory=512m", "--conf", f"spark.sql.warehouse.dir={tmp_path / 'wh'}",
           "--conf", f"spark.executorEnv.PYTHONPATH={installed}",
           "--driver-java-options", f"-Dderby.system.home={tmp_path}", "-S", "-e", sql]
    env = {**_env(installed), "SPARK_HOME": str(spark_home())}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln.split("\t") for ln in r.stdout.splitlines() if ln.startswith("rows\t")]
    assert lines == [["rows", str(n), str(n)]]
