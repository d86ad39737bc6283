"""Read an ``rlm iceberg`` table with Spark SQL through Iceberg's ``SparkCatalog``.

Run by ``test_iceberg.py`` with the separate pyspark 4.1 (``tests/services/spark41.py``), never
imported by the tests: the runtime on Maven Central is built for Spark 4.0/4.1 only. Argument: one
JSON object (catalog name, the Iceberg catalog's properties, table, jars, one day's bounds and a timestamp
cutoff) and the file to write one JSON object to: the rows in offset order (binary fields as
hex, timestamps as epoch milliseconds), the day's count and the count at or after the cutoff.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from spark41_session import iceberg_session


def main(args: dict[str, Any]) -> dict[str, Any]:
    name = args["catalog_name"]
    spark = iceberg_session(args, "rlm-iceberg-spark41")
    try:
        # quoted: a table named after its topic may hold '-'
        table = ".".join(f"`{part}`" for part in [name, *args["table"].split(".", 1)])
        rows = spark.sql(
            f"SELECT `offset`, `partition`, timestampType, unix_millis(`timestamp`) AS ts, "
            f"hex(key) AS key, hex(value) AS value, "
            f"transform(headers, h -> named_struct('k', h.key, 'v', hex(h.value))) AS headers "
            f"FROM {table} ORDER BY `partition`, `offset`").collect()
        day = spark.sql(
            f"SELECT count(*) FROM {table} WHERE `timestamp` >= TIMESTAMP '{args['day_start']}' "
            f"AND `timestamp` < TIMESTAMP '{args['day_end']}'").collect()[0][0]
        after = spark.sql(
            f"SELECT count(*) FROM {table} WHERE `timestamp` >= TIMESTAMP '{args['cutoff']}'"
        ).collect()[0][0]
        return {"spark": spark.version,
                "rows": [[r["offset"], r["partition"], r["timestampType"], r["ts"], r["key"], r["value"],
                          [[h["k"], h["v"]] for h in r["headers"]] if r["headers"] is not None else None]
                         for r in rows],
                "day": day, "after": after}
    finally:
        spark.stop()


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(main(json.loads(sys.argv[1]))))
