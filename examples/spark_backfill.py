"""``rlm backfill`` as a Spark application, for ``spark-submit`` (same arguments as the command).

    spark-submit --master spark://host:7077 \
        --conf spark.pyspark.python=/opt/rlm/.venv/bin/python \
        examples/spark_backfill.py --config /etc/rlm/rlm.yaml --topic events \
        --from 2026-01-01 --to 2026-01-08 --output hdfs://nn:8020/warehouse/events

The executors import ``fetcher`` and ``rlm``: install the package in the Python they run (or
ship it with ``--py-files``). The master comes from ``spark-submit``; ``--master`` is not needed.
"""

import sys

from rlm.commands.backfill import main

if __name__ == "__main__":
    sys.exit(main())
