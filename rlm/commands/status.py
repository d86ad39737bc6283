"""``rlm status [--json]``: per partition local start/end, LSO, remote start/end, copy lag, last copy/error.

Reads the status file the daemon keeps in its work dir (``--work-dir``, or ``work_dir`` from
``--config``), so it works whether or not the daemon is running.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from rlm.config import load_config
from rlm.daemon.status import DaemonStatus, read_status


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("status", help="show the tiering status of each partition", description=__doc__)
    p.add_argument("--config", "-c", type=Path, help="the daemon's configuration file")
    p.add_argument("--work-dir", type=Path, help="the daemon's work dir (instead of --config)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=status)


def _ago(ms: int, now_ms: int) -> str:
    if ms < 0:
        return "-"
    s = max(0, (now_ms - ms) // 1000)
    return f"{s}s ago" if s < 120 else f"{s // 60}m ago" if s < 7200 else f"{s // 3600}h ago"


def render_table(st: DaemonStatus) -> str:
    now = int(time.time() * 1000)
    head = f"node {st.node_id}  state {st.state}  pid {st.pid}  updated {_ago(st.updated_ms, now)}" + (
        f"  http :{st.http_port}" if st.http_port else ""
    )
    cols = ("PARTITION", "ROLE", "LOCAL", "LSO", "REMOTE", "SEGS", "LAG", "LAST COPY", "LAST ERROR")
    rows = [cols]
    for key in sorted(st.partitions):
        p = st.partitions[key]
        remote = f"{p.remote_start}..{p.remote_end}" if p.remote_end >= 0 else "-"
        rows.append(
            (
                key,
                p.role,
                f"{p.local_start}..{p.local_end}",
                str(p.lso),
                remote,
                str(p.remote_segments),
                str(p.copy_lag),
                _ago(p.last_copy_ms, now),
                (p.last_error or "-")[:60],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    return "\n".join([head, *lines])


def status(args: argparse.Namespace) -> int:
    if args.work_dir is not None:
        work_dir = args.work_dir
    else:
        work_dir = (
            load_config(args.config).work_dir if args.config else load_config(None, log_dirs=[]).work_dir
        )
    st = read_status(work_dir)
    if args.json:
        json.dump(asdict(st), sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(render_table(st))
    return 0
