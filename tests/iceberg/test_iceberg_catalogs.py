"""``rlm iceberg`` on Iceberg's own REST catalog server, and its tables read back with Spark SQL.

The workload is test_iceberg's (a tiered topic with two codecs, a committed and an aborted
transaction each larger than a segment); the truth is what a read_committed consumer read from
the broker. The REST catalog is Apache Iceberg's ``RESTCatalogServer`` from Maven Central (one per
session, warehouse on SeaweedFS); Spark SQL runs in a process of its own with
iceberg-spark-runtime (the session-wide SparkSession has no Iceberg on its classpath).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.iceberg.test_iceberg import World, _check_equal, run_iceberg, world  # noqa: F401 (fixture)
from tests.services.iceberg_rest import IcebergRestCatalog
from tests.services.proc import ensure_jars

pytest.importorskip("pyiceberg")

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]

HERE = Path(__file__).parent
COLUMNS = "`offset`, timestampType, unix_millis(`timestamp`) AS ms, key, value, headers"


def spark_catalog_rest(rest: IcebergRestCatalog) -> dict[str, str]:
    """Spark's Iceberg catalog properties for the REST server (S3FileIO for the warehouse)."""
    p = rest.properties
    return {"type": "rest", "uri": rest.uri, "warehouse": rest.warehouse,
            "io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "s3.endpoint": p["s3.endpoint"],
            "s3.path-style-access": "true", "s3.access-key-id": p["s3.access-key-id"],
            "s3.secret-access-key": p["s3.secret-access-key"], "client.region": p["s3.region"],
            "http-client.type": "urlconnection"}


def spark_catalog_sqlite(catalog: dict[str, str]) -> dict[str, str]:
    """Spark's JdbcCatalog on the SQLite file of PyIceberg's SQL catalog (same tables, same rows:
    ``iceberg_tables`` keyed by catalog name, so the Spark catalog is named like PyIceberg's)."""
    return {"type": "jdbc", "uri": "jdbc:" + catalog["uri"].replace(":///", ":/", 1),
            "warehouse": catalog["warehouse"]}


def spark_sql(catalogs: dict[str, dict[str, str]], queries: dict[str, str], tmp: Path) -> dict[str, Any]:
    out = tmp / f"spark-{len(list(tmp.glob('spark-*.pickle')))}.pickle"
    cmd = [sys.executable, str(HERE / "spark_read.py"), "--jars", str(ensure_jars("iceberg-spark")),
           "--out", str(out)]
    cmd += [f"--catalog={n}={json.dumps(p)}" for n, p in catalogs.items()]
    cmd += [f"--query={t}={q}" for t, q in queries.items()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp)
    assert r.returncode == 0, r.stderr[-4000:]
    with out.open("rb") as fh:
        return dict(pickle.load(fh))


def _rest_result(world: World, rest: IcebergRestCatalog, name: str) -> dict[str, Any]:
    from fetcher.iceberg import read_ledger

    sync = world.sync(name, catalog=rest.properties)
    ledger = read_ledger(sync.table)
    return {"catalog": rest.properties, "catalog_name": "rlm", "table": sync.identifier,
            "segments": len(ledger.segments), "rows": ledger.rows}


def test_rest_catalog_backfill_equals_a_read_committed_consumer(world: World,
                                                                 iceberg_rest: IcebergRestCatalog) -> None:
    """``rlm iceberg`` configured with ``type: rest`` (Iceberg's REST server, warehouse on S3):
    every lineage segment once, row for row what the consumer read; a rerun adds nothing."""
    cfg = world.config("rest", catalog=iceberg_rest.properties)
    result = run_iceberg(cfg, world.topic, "--from", "earliest")
    ids = world.plan_ids()
    assert result["catalog"]["type"] == "rest" and result["catalog"]["uri"] == iceberg_rest.uri
    assert "s3.secret-access-key" not in result["catalog"]
    assert result["location"].startswith(f"s3://{iceberg_rest.bucket}/")
    assert result["added_segments"] == len(ids) and result["orphan_files"] == 0
    _check_equal(world, {**result, "catalog": iceberg_rest.properties}, ids)
    again = run_iceberg(cfg, world.topic)
    assert (again["added_segments"], again["segments"], again["rows"]) == (0, len(ids), result["rows"])
    # the server holds the commits: its own view of the table names every segment once
    from pyiceberg.catalog import load_catalog

    table = load_catalog("other", **iceberg_rest.properties).load_table(result["table"])
    named = [s[1] for snap in table.snapshots()
             for s in json.loads(snap.summary.additional_properties["rlm.segments"])]
    assert sorted(named) == sorted(ids)


def test_spark_sql_reads_the_sqlite_and_the_rest_catalog_tables(world: World, iceberg_rest: IcebergRestCatalog,
                                                               tmp_path: Path) -> None:
    """Spark SQL (iceberg-spark-runtime) reads the table on the embedded SQLite catalog (Spark's
    JdbcCatalog on PyIceberg's catalog.db) and on the REST catalog: both equal the consumer's read."""
    lite = world.sync("lite")
    lite.run_once()
    rest = world.sync("rest", catalog=iceberg_rest.properties)
    rest.run_once()  # (a no-op after the REST test; it makes this test standalone)
    got = spark_sql({"rlm": spark_catalog_sqlite(world.catalog), "restcat": spark_catalog_rest(iceberg_rest)},
                    {"lite": f"SELECT {COLUMNS} FROM rlm.kafka.`{lite.identifier.split('.', 1)[1]}` ORDER BY 1",
                     "rest": f"SELECT {COLUMNS} FROM restcat.kafka.`{rest.identifier.split('.', 1)[1]}` "
                             "ORDER BY 1"}, tmp_path)
    assert [r[0] for r in got["lite"]] == [t[0] for t in world.truth]
    assert got["lite"] == world.truth
    assert got["rest"] == world.truth
