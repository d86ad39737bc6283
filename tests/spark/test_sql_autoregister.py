"""``kafka-tiered`` without glue: PySpark >= 4 registers it from the installed ``pyspark_kafka_tiered``.

No test here calls ``fetcher.spark.register``. Both ways users install the project are covered:
the test venv's editable install (``pip install -e``: a static ``.pth`` of the repo root, which
PySpark's ``pkgutil`` lookup sees) runs a fresh local driver reading through the DataFrame API and
``CREATE TEMPORARY VIEW ... USING``; the built wheel, first on PYTHONPATH as in a user's
environment, runs ``spark-sql -e`` and ``spark-submit`` of a SQL file on the standalone cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services.spark_cluster import SparkCluster, spark_home
from tests.spark.helpers import expected_rows, tier
from tests.wheel import build_wheel, install_target

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    return install_target(build_wheel(tmp / "dist"), tmp / "site")


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    root = tmp_path_factory.mktemp("sql-tiered")
    cfg = tier(root, [("sqltopic", 0, 60)], seg_bytes=16 * 1024)
    return cfg, "sqltopic", len(expected_rows(root / "logs", "sqltopic", 0))


def _env(site: Path | None) -> dict[str, str]:
    """The environment of a user's process: the wheel's target dir on PYTHONPATH, or (``None``)
    nothing but the test venv's own install."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_") and k != "PYTHONPATH"}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


_LOOKUP = ("import pkgutil, pyspark_kafka_tiered as m; "
           "print([i.name for i in pkgutil.iter_modules() if i.name.startswith('pyspark_')], "
           "m.DefaultSource.name(), m.__file__)")


def test_the_wheel_installs_the_lookup_module(installed: Path) -> None:
    mod = installed / "pyspark_kafka_tiered.py"
    assert mod.read_text() == (ROOT / "pyspark_kafka_tiered.py").read_text()
    r = subprocess.run([sys.executable, "-c", _LOOKUP], capture_output=True, text=True, env=_env(installed),
                       cwd=installed, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['pyspark_kafka_tiered']", "kafka-tiered", str(mod)]


def _editable() -> bool:
    """Whether the venv's own install is editable (a build's egg-info in the root would shadow it)."""
    import sysconfig
    from importlib.metadata import distributions

    for dist in distributions(name="kafka-rlm-sidecar", path=[sysconfig.get_paths()["purelib"]]):
        direct = dist.read_text("direct_url.json")
        return direct is not None and bool(json.loads(direct).get("dir_info", {}).get("editable", False))
    return False


def test_the_editable_install_is_seen_by_pkgutil(tmp_path: Path) -> None:
    """setuptools' import-hook finder would hide the module; the static .pth of the root does not."""
    if not _editable():
        pytest.skip("the test venv is not an editable install of the project")
    r = subprocess.run([sys.executable, "-c", _LOOKUP], capture_output=True, text=True, env=_env(None),
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    mod = ROOT / "pyspark_kafka_tiered.py"
    assert r.stdout.split() == ["['pyspark_kafka_tiered']", "kafka-tiered", str(mod)]


def test_fresh_session_reads_without_register(tiered: tuple[Path, str, int], tmp_path: Path) -> None:
    """The editable install, as `make install` leaves it (the wheel is the cluster tests' install)."""
    cfg, topic, n = tiered
    r = subprocess.run([sys.executable, str(HERE / "sql_driver.py"), "--config", str(cfg), "--topic", topic],
                       capture_output=True, text=True, env=_env(None), cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert n > 100
    assert got["dataframe"] == got["sql"] == n
    # bad input: a misspelt option fails the query and names the option
    assert got["typo_error"] is not None and "'subscrbe': unknown option" in got["typo_error"]


def _sql_cli(cluster: SparkCluster, installed: Path, tmp_path: Path) -> list[str]:
    """The options of the SQL command line driver on ``cluster``, executors on the wheel."""
    return ["--master", cluster.url,
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1",  # one executor
            "--conf", f"spark.sql.warehouse.dir={tmp_path / 'wh'}",
            "--conf", f"spark.executorEnv.PYTHONPATH={installed}",
            "--driver-java-options", f"-Dderby.system.home={tmp_path}"]


def _run_cli(cmd: list[str], installed: Path, tmp_path: Path) -> list[list[str]]:
    env = {**_env(installed), "SPARK_HOME": str(spark_home())}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return [ln.split("\t") for ln in r.stdout.splitlines() if ln.startswith("rows\t")]


def test_spark_sql_cli_on_the_cluster(installed: Path, tiered: tuple[Path, str, int],
                                      spark_cluster: SparkCluster, tmp_path: Path) -> None:
    cluster, (cfg, topic, n) = spark_cluster, tiered
    sql = (f"CREATE TEMPORARY VIEW v USING `kafka-tiered` "
           f"OPTIONS (`rlm.config` '{cfg}', subscribe '{topic}');"
           f" SELECT 'rows', count(*), count(DISTINCT offset) FROM v;")
    cmd = [str(spark_home() / "bin" / "spark-sql"), *_sql_cli(cluster, installed, tmp_path), "-S", "-e", sql]
    assert _run_cli(cmd, installed, tmp_path) == [["rows", str(n), str(n)]]


def test_spark_submit_of_a_sql_file_on_the_cluster(installed: Path, tiered: tuple[Path, str, int],
                                                   spark_cluster: SparkCluster, tmp_path: Path) -> None:
    """``spark-submit`` of the SQL command line driver with ``-f``: a SQL file, no Python at all."""
    cluster, (cfg, topic, n) = spark_cluster, tiered
    script = tmp_path / "count.sql"
    script.write_text(f"""-- kafka-tiered from a SQL file
CREATE TEMPORARY VIEW tiered USING `kafka-tiered`
  OPTIONS (`rlm.config` '{cfg}', assign '{{"{topic}": [0]}}', startingOffsets '{{"{topic}": {{"0": 10}}}}');
SELECT 'rows', count(*), min(offset), max(offset) FROM tiered;
""")
    cli_driver = "org.apache.spark.sql.hive.thriftserver.SparkSQLCLIDriver"  # what bin/spark-sql submits
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", cli_driver,
           *_sql_cli(cluster, installed, tmp_path), "-S", "-f", str(script)]
    rows = _run_cli(cmd, installed, tmp_path)
    assert len(rows) == 1 and rows[0][0] == "rows"
    count, lo, hi = map(int, rows[0][1:])
    assert (count, lo) == (n - 10, 10)  # the first batch holds offsets 0..19 (write_mixed)
    assert hi >= lo + count - 1  # the control records' offsets are not rows
