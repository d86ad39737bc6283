"""``rlm iceberg``: keep an Apache Iceberg table of a tiered topic in step with the remote tier.

Appends every remote segment of the topic's leader-epoch lineage (COPY_SEGMENT_FINISHED only)
that the table does not hold yet, one snapshot per group of segments whose summary names them,
so a rerun, a crash or a second writer never adds a segment twice and never misses one.
read_committed by default: aborted records are never in the table, and a segment is added only
once its transactions are decided (the read_committed bound). Records below the log start offset
are never written. With ``--follow`` it keeps going, a pass every ``iceberg.poll_interval_ms``.

Ends with where the table is; ``--json`` prints one object that scripts (and
``pyiceberg.catalog.load_catalog(catalog_name, **catalog)``) can open:
``{"catalog": {...}, "catalog_name": "rlm", "table": "ns.name", "segments": N, "rows": N, ...}``.
Credential-like catalog properties are left out of it. See docs/iceberg.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlm.commands.iceberg_maint import PassHook, add_arguments, compact_command
from rlm.config import DaemonConfig, load_config
from rlm.errors import ConfigError, IcebergTableError, RlmError
from rlm.secrets import is_secret_key


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("iceberg", help="keep an Iceberg table of a tiered topic in step with remote",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", "-c", type=Path, required=True, help="the `rlm run` configuration file")
    p.add_argument("--topic", "-t", required=True, help="the tiered topic")
    p.add_argument("--from", dest="start", default="earliest", choices=["earliest"],
                   help="earliest (default): the whole remote history from the log start offset")
    p.add_argument("--follow", action="store_true", help="keep appending new segments until stopped")
    p.add_argument("--isolation", choices=["read_committed", "read_uncommitted"],
                   help="default: iceberg.isolation (read_committed)")
    p.add_argument("--engine", choices=["pyiceberg", "spark"], default="pyiceberg",
                   help="who writes the data files: pyiceberg (default, in this process) or spark (a Spark "
                        "job over the kafka-tiered source, in the SparkSession this process starts or "
                        "spark-submit gives it; same commit and ledger, so the two take turns on a table)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    add_arguments(p)
    p.set_defaults(func=iceberg)


def public_properties(props: dict[str, str]) -> dict[str, str]:
    """The catalog properties without credentials (those come from the config or the environment)."""
    return {k: v for k, v in props.items() if not is_secret_key(k)}


def summary(config: DaemonConfig, sync: Any, added_segments: int, added_rows: int,
            waiting: int, orphans: int) -> dict[str, Any]:
    """``segments``/``rows``: the whole table's; ``topics``: per topic it holds (several when the
    table is shared, ``iceberg.shared_tables``); ``topic``: the one this run wrote."""
    from rlm.tables import catalog_properties, read_ledgers

    sync.status()  # (reloads the table)
    ledgers, rows, snapshots = read_ledgers(sync.table)
    decoding = {} if getattr(sync, "decoding", None) is None else sync.decoding.summary()
    return {**decoding, "catalog": public_properties(catalog_properties(config)),
            "catalog_name": config.iceberg.catalog_name, "table": sync.identifier,
            "location": sync.table.location(), "topic": sync.topic,
            "segments": sum(ledger.segment_count for ledger in ledgers.values()), "rows": rows,
            "topics": {t: {"segments": ledger.segment_count, "rows": ledger.rows}
                       for t, ledger in sorted(ledgers.items())},
            "snapshots": snapshots, "added_segments": added_segments, "added_rows": added_rows,
            "waiting_segments": waiting, "orphan_files": orphans}


def _open_catalog(config: DaemonConfig, open_catalog: Any) -> Any:
    """The catalog, or one line naming it: a catalog's own errors (SQLAlchemy's ``database or
    disk is full`` for the embedded one under the work dir) are not tracebacks for an operator."""
    try:
        return open_catalog(config)
    except (OSError, RlmError):
        raise
    except Exception as e:
        from rlm.tables import catalog_properties

        where = public_properties(catalog_properties(config)).get("uri", config.iceberg.catalog_name)
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise IcebergTableError(
            f"cannot open the Iceberg catalog {config.iceberg.catalog_name!r} at {where}: {reason} "
            "(the embedded catalog lives under work_dir/iceberg: it needs a writable file system with "
            "free space; or set iceberg.catalog)") from e


def iceberg(args: argparse.Namespace) -> int:
    if args.action == "compact":
        return compact_command(args)
    try:
        from rlm.tables import IcebergSync, open_catalog, orphan_files
    except ImportError as e:
        raise ConfigError("rlm iceberg needs the `iceberg` extra "
                          f"(pip install 'kafka-rlm-sidecar[iceberg]'): {e}") from None
    from fetcher import RemoteFetcher
    from rlm.logging_setup import configure_logging

    config = load_config(args.config)
    # stdout carries the summary; logs go to stderr (a follower logs its commits, a pass warnings only)
    configure_logging("console", config.log_level if args.follow else "warning")
    stop = threading.Event()
    if args.follow:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    added_segments = added_rows = waiting = conflicts = lost_answers = 0
    with RemoteFetcher.from_config(config) as f:
        catalog = _open_catalog(config, open_catalog)
        spark = None
        own_spark = False
        sync: IcebergSync
        if args.engine == "spark":
            from pyspark.sql import SparkSession

            from rlm.tables.spark_engine import SparkIcebergSync

            own_spark = SparkSession.getActiveSession() is None  # (under spark-submit: the job's session)
            spark = SparkSession.builder.appName(f"rlm-iceberg-{args.topic}").getOrCreate()
            sync = SparkIcebergSync(f, catalog, config.iceberg, args.topic, isolation=args.isolation,
                                    spark=spark, rlm_config=str(Path(args.config).resolve()))
        else:
            sync = IcebergSync(f, catalog, config.iceberg, args.topic, isolation=args.isolation)
        after_pass = PassHook(config, f, sync, args.metrics_port)
        while True:
            t0 = time.monotonic()
            r = sync.run_once()
            added_segments += r.added_segments
            added_rows += r.added_rows
            waiting = r.waiting
            conflicts += r.conflicts
            lost_answers += r.lost_answers
            after_pass(r, time.monotonic() - t0)
            if r.added_segments or not args.follow:
                print(f"rlm iceberg: {sync.identifier}: +{r.added_segments} segments, +{r.added_rows} rows "
                      f"in {time.monotonic() - t0:.1f}s ({r.conflicts} commit conflicts, {r.waiting} "
                      f"segments waiting for their transactions)", file=sys.stderr, flush=True)
            if not args.follow or stop.wait(config.iceberg.poll_interval_ms / 1000):
                break
        if spark is not None and own_spark:
            spark.stop()
        orphans = orphan_files(sync.table)
        out = summary(config, sync, added_segments, added_rows, waiting, len(orphans))
        out["commit_conflicts"] = conflicts
        out["commits_landed_without_answer"] = lost_answers
        out["expired_rows"] = after_pass.expired_rows
    if orphans:
        print(f"rlm iceberg: warning: {len(orphans)} data files under {out['location']}/data are in no "
              f"snapshot (a writer stopped before its commit); they are never read and can be deleted",
              file=sys.stderr)
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(f"{out['table']}: {out['segments']} segments, {out['rows']} rows at {out['location']} "
              f"(catalog {out['catalog_name']}: {json.dumps(out['catalog'], sort_keys=True)})")
    return 0
