"""Another engine's maintenance of an ``rlm iceberg`` table: Spark's ``rewrite_data_files``, then
(optionally) ``expire_snapshots``, through Iceberg's ``SparkCatalog``.

Run by ``test_iceberg_spark_rewrite.py`` with the separate pyspark 4.1 (``tests/services/spark41.py``),
never imported by the tests: the runtime on Maven Central is built for Spark 4.0/4.1 only.
Argument: one JSON object (catalog name, the Iceberg catalog's properties, table, jars, the
rewrite's options, whether to expire) and the file to write one JSON object to: the data files
before and after, what each procedure answered, and the table's properties and snapshots after
(as Spark's Iceberg sees them).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from spark41_session import iceberg_session


def _files(spark: Any, table: str) -> list[str]:
    return sorted(r["file_path"] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect())


def main(args: dict[str, Any]) -> dict[str, Any]:
    name = args["catalog_name"]
    spark = iceberg_session(args, "rlm-iceberg-spark41-rewrite")
    try:
        parts = args["table"].split(".", 1)
        quoted = ".".join(f"`{p}`" for p in parts)  # a table named after its topic may hold '-'
        table = f"`{name}`.{quoted}"
        options = ", ".join(f"'{k}', '{v}'" for k, v in args["options"].items())
        before = _files(spark, table)
        rw = spark.sql(f"CALL `{name}`.system.rewrite_data_files(table => '{quoted}', "
                       f"options => map({options}))").collect()[0].asDict()
        expired: dict[str, Any] | None = None
        if args["expire"]:
            # every snapshot but the current (the rewrite's); a cutoff past it, and keep one
            cutoff = (datetime.now(UTC) + timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S")
            expired = spark.sql(f"CALL `{name}`.system.expire_snapshots(table => '{quoted}', "
                                f"older_than => TIMESTAMP '{cutoff} UTC', retain_last => 1)"
                                ).collect()[0].asDict()
        props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
        snaps = [r.asDict() for r in spark.sql(
            f"SELECT snapshot_id, operation FROM {table}.snapshots ORDER BY committed_at").collect()]
        return {"spark": spark.version, "files_before": before, "files_after": _files(spark, table),
                "rewrite": rw, "expire": expired, "properties": props, "snapshots": snaps,
                "rows": spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]}
    finally:
        spark.stop()


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(main(json.loads(sys.argv[1])), default=str))
