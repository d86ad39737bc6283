"""The upkeep around ``rlm iceberg``'s appends: expiry, lag and metrics after each pass, compaction.

``rlm iceberg compact --config F --topic T [--json]`` rewrites the small files of the table's
closed partitions (days or hours older than the newest) at ``iceberg.target_file_size_bytes`` in
one replace snapshot (the recorded segment ids stay: a rerun of ``rlm iceberg`` adds nothing),
then deletes the orphan data files (a dead writer's, older than ``iceberg.orphan_min_age_ms``)
and reports what it did. See docs/iceberg.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rlm.config import DaemonConfig, load_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        nargs="?",
        default="sync",
        choices=["sync", "compact"],
        help="sync (default): append what is missing; compact: rewrite small files, delete orphans",
    )
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (with --follow)")
    p.add_argument(
        "--orphan-min-age-ms",
        type=int,
        help="compact: delete orphans this old (default: iceberg.orphan_min_age_ms)",
    )


class PassHook:
    """Run after every pass of ``rlm iceberg``: expire (when configured), measure the lag, write it
    for ``rlm status`` and update the metrics."""

    def __init__(self, config: DaemonConfig, fetcher: Any, sync: Any, metrics_port: int | None) -> None:
        from rlm.tables.metrics import IcebergMetrics

        self.config, self.fetcher, self.sync = config, fetcher, sync
        self.metrics = IcebergMetrics()
        self.expired_rows = 0
        if metrics_port is not None:
            from prometheus_client import start_http_server

            start_http_server(metrics_port, registry=self.metrics.registry)

    def __call__(self, result: Any, seconds: float) -> None:
        from rlm.tables.expire import expire_deleted
        from rlm.tables.lag import measure, write_lag

        if self.config.iceberg.expire_deleted_segments:
            self.expired_rows += expire_deleted(
                self.fetcher, self.sync.catalog, self.sync.identifier, self.sync.topic,
                writer=getattr(self.sync, "writer", ""),
            ).rows_removed
        ledger = self.sync.status()
        lag = measure(
            self.fetcher, self.sync.table, ledger, self.sync.topic, self.sync.identifier, result.waiting
        )
        write_lag(self.config.work_dir, lag)
        self.metrics.record_pass(
            self.sync.identifier, result.added_segments, result.added_rows, result.conflicts, seconds
        )
        self.metrics.record_lag(lag)


def compact_command(args: argparse.Namespace) -> int:
    from rlm.logging_setup import configure_logging
    from rlm.tables import ensure_table, open_catalog, table_identifier
    from rlm.tables.compact import compact

    config = load_config(args.config)
    configure_logging("console", "warning")  # stdout carries the summary
    cfg = config.iceberg
    catalog = open_catalog(config)
    ensure_table(catalog, cfg, args.topic)
    min_age_ms = cfg.orphan_min_age_ms if args.orphan_min_age_ms is None else args.orphan_min_age_ms
    r = compact(
        catalog,
        table_identifier(cfg, args.topic),
        target_file_size_bytes=cfg.target_file_size_bytes,
        min_files=cfg.compact_min_files,
        orphan_min_age_s=min_age_ms / 1000,
    )
    out = {"table": table_identifier(cfg, args.topic), **r.to_dict()}
    if r.orphans_kept:
        print(
            f"rlm iceberg compact: {len(r.orphans_kept)} unreferenced data files are younger than "
            f"{min_age_ms} ms (a writer may be about to commit them): kept",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(
            f"{out['table']}: {r.files_rewritten} small files of {r.partitions} closed partitions rewritten "
            f"as {r.files_written} ({r.rows} rows); {len(r.orphans_deleted)} orphan files deleted"
        )
    return 0
