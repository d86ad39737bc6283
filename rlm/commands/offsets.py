"""``rlm offsets``: the offset for a timestamp, per partition, over remote + local data.

    rlm offsets --config F --topic T [--partition P]
                --timestamp (ISO-8601 | epoch ms | 2h-ago | earliest | latest) [--json]

Kafka's ListOffsets semantics (KIP-33): the first offset whose record timestamp is >= TS.
Remote segments answer first; past the remote end (and ``latest``) the broker answers when
``bootstrap_servers`` is configured. ``earliest`` is the *remote* log start (the oldest record
anywhere). Each answer says where it came from (``remote`` or ``broker``); a partition where no
record is that late shows ``-`` (``null`` in JSON), as Kafka answers -1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rlm.commands.readside import (
    Progress,
    add_config_arg,
    format_ts,
    lookup,
    open_fetcher,
    parse_timestamp,
    partitions_of,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("offsets", help="offsets for a timestamp (remote + broker)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", "-p", type=int, help="one partition (default: every partition)")
    p.add_argument("--timestamp", type=parse_timestamp, required=True,
                   help="ISO-8601, epoch ms, 2h-ago, earliest or latest")
    p.add_argument("--json", action="store_true", help="one JSON object per partition")
    p.add_argument("--bootstrap-server", help="override the config's bootstrap_servers")
    p.set_defaults(func=offsets)


def answers(config: Any, topic: str, partition: int | None, timestamp: int,
            bootstrap_servers: str | None = None) -> list[dict[str, Any]]:
    """One row per partition: partition, offset, timestamp, leader_epoch, source (or Nones)."""
    progress = Progress(f"offsets {topic}")
    rows = []
    with open_fetcher(config, bootstrap_servers) as f:
        parts = [partition] if partition is not None else partitions_of(f, topic)
        for i, p in enumerate(parts):
            progress.update(f"partition {p} ({i + 1}/{len(parts)})")
            a = lookup(f, topic, p, timestamp)
            row: dict[str, Any] = {"topic": topic, "partition": p, "offset": None, "timestamp": None,
                                   "leader_epoch": None, "source": None}
            if a is not None:
                row.update(a.to_dict())
            rows.append(row)
    progress.done()
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    cols = ("TOPIC", "PARTITION", "OFFSET", "TIMESTAMP", "LEADER-EPOCH", "SOURCE")
    table = [cols]
    for r in rows:
        found = r["offset"] is not None
        table.append((r["topic"], str(r["partition"]), str(r["offset"]) if found else "-",
                      format_ts(r["timestamp"]) if found else "-",
                      str(r["leader_epoch"]) if found and r["leader_epoch"] >= 0 else "-",
                      r["source"] or "-"))
    widths = [max(len(t[i]) for t in table) for i in range(len(cols))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(t)).rstrip() for t in table)


def offsets(args: argparse.Namespace) -> int:
    rows = answers(args.config, args.topic, args.partition, args.timestamp, args.bootstrap_server)
    if args.json:
        for r in rows:
            sys.stdout.write(json.dumps(r) + "\n")
    else:
        print(render(rows))
    return 0
