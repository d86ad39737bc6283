"""The Spark session of the pyspark 4.1 scripts (``spark41_read.py``, ``spark41_rewrite.py``): one
local core, Iceberg's SQL extensions and ``SparkCatalog`` named ``args["catalog_name"]`` with the
Iceberg catalog's own properties (``args["catalog"]``) and the runtime jars (``args["jars"]``).

Imported by those scripts from their own folder (they run as scripts in the separate pyspark 4.1,
never imported by the tests).
"""

from __future__ import annotations

from typing import Any


def iceberg_session(args: dict[str, Any], app: str) -> Any:
    from pyspark.sql import SparkSession

    name = args["catalog_name"]
    builder = (SparkSession.builder.master("local[1]").appName(app)
               .config("spark.jars", ",".join(args["jars"]))
               .config("spark.driver.memory", "512m")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.sql.extensions",
                       "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
               .config(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog"))
    for key, value in args["catalog"].items():  # the Iceberg catalog's own properties
        builder = builder.config(f"spark.sql.catalog.{name}.{key}", value)
    return builder.getOrCreate()
