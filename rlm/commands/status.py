"""``rlm status [--json]``: per partition offsets, copy lag, gaps, last copy/error; is the daemon alive.

Reads the status file the daemon keeps in its work dir (``--work-dir``, or ``work_dir`` from
``--config``), so it works whether or not the daemon is running. It also says whether the daemon
is really alive: a status file that claims ``running`` while its pid is gone (kill -9, OOM) or
that has not been rewritten for several heartbeats is reported as ``DEAD`` / ``STALE`` (exit 1).
Current dependency problems (storage, metadata, cluster unreachable) are shown while they last,
and the topics found in the log dirs that are not tiered are listed with the reason.

A partition the configuration asks to tier that the sidecar is not protecting (discovery refused
it: topic id unknown beside a broker before 2.8, an unreadable ``partition.metadata``; or this node
leads it and its last run failed: copy failing) is named with the reason on an ``ERROR`` line and
makes the command fail with exit status 5, so that a script or a probe need not parse the table;
``--json`` gives each partition ``protected`` and ``unprotected_reason`` and the whole list under
``unprotected``. A dead or stale daemon (exit 1) takes precedence.

LOG START = the partition's log start offset: no reader serves a record below it (remote retention
and ``DeleteRecords`` move it; the daemon publishes it to readers);
LAG = offsets in rolled segments below the LSO not yet copied (the active segment never counts);
GAP = offsets missing from remote storage because the broker deleted them before they were copied.

Every offset range is written ``[start, end)``: start inclusive, end exclusive, Kafka's convention
(a log end offset is the next offset to be written). ``--json`` gives each partition's ranges the
same way under ``ranges`` (``local``, ``remote``, ``gaps``: ``[start, end)`` pairs); its other
fields are the status file's, where ``remote_end`` is the last remote offset (inclusive) and
``local_end`` the log end offset (exclusive).

A restarted daemon starts from the ranges its previous run wrote (storage and metadata still hold
them) until its first pass has looked at each partition again, so a partition tiered before is
never shown empty while the pass runs or after it was interrupted.

Iceberg tables kept by ``rlm iceberg`` with this work dir are listed after the partitions: the
segments and offsets each is behind the remote tier, as its writer measured them after its last
pass (``<work_dir>/iceberg/lag/``; the age of that measure is shown), and its last commit.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlm.config import load_config
from rlm.daemon.status import (
    CARRIED_NOTE,
    DaemonStatus,
    PartitionStatus,
    pid_alive,
    read_status,
    unprotected_reason,
)
from rlm.exit_codes import ExitCode

# A heartbeat may be late by a health check's own timeouts; this many missed beats means stale.
STALE_HEARTBEATS = 4
STALE_GRACE_MS = 30_000


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


def _until(ms: int, now_ms: int) -> str:
    s = max(0, (ms - now_ms) // 1000)
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def liveness(st: DaemonStatus, now_ms: int) -> tuple[str, str | None]:
    """(state to show, why it differs from the file's state or None)."""
    if st.state == "stopped":
        return st.state, None
    if st.pid and (not st.host or st.host == socket.gethostname()) and not pid_alive(st.pid, st.proc_start):
        last = _ago(st.updated_ms, now_ms)
        return "DEAD", f"pid {st.pid} is not running (file says {st.state!r}, last update {last})"
    limit = STALE_HEARTBEATS * st.heartbeat_ms + STALE_GRACE_MS
    if st.heartbeat_ms and now_ms - st.updated_ms > limit:
        return "STALE", (
            f"no update for {_ago(st.updated_ms, now_ms).removesuffix(' ago')} "
            f"(heartbeat every {st.heartbeat_ms / 1000:g}s)"
        )
    return st.state, None


def log_start_of(p: PartitionStatus) -> int:
    """The partition's log start: no record below it is served (remote retention moves the remote
    start, ``DeleteRecords`` the published bound; with nothing remote, the local log start)."""
    first = p.remote_start if p.remote_end >= 0 else p.local_start
    return max(p.log_start, first)


RANGE_NOTE = "offset ranges are [start, end): start inclusive, end exclusive, as in Kafka"


def span(start: int, end: int) -> str:
    """``[start, end)``, the one way an offset range is shown (``end`` exclusive); ``-`` when unknown."""
    return f"[{start}, {end})" if start >= 0 and end >= 0 else "-"


def ranges_of(p: PartitionStatus) -> dict[str, Any]:
    """The partition's ranges as ``[start, end)`` pairs (``--json``'s ``ranges``)."""
    return {
        "local": [p.local_start, p.local_end] if p.local_end >= 0 else None,
        "remote": [p.remote_start, p.remote_end + 1] if p.remote_end >= 0 else None,
        "gaps": [[a, b + 1] for a, b in p.gaps],
    }


def render_table(st: DaemonStatus, now: int | None = None) -> str:
    now = int(time.time() * 1000) if now is None else now
    state, why = liveness(st, now)
    head = f"node {st.node_id}  state {state}  pid {st.pid}  updated {_ago(st.updated_ms, now)}" + (
        f"  http :{st.http_port}" if st.http_port else ""
    )
    out = [head, f"  ({RANGE_NOTE})"]
    if why:
        out.append(f"  {state}: {why}")
    for dep, prob in sorted(st.problems.items()):
        out.append(f"  ERROR {dep} (since {_ago(int(prob.get('since_ms', -1)), now)}): {prob.get('error')}")
    cols = ("PARTITION", "ROLE", "LOG START", "LOCAL", "LSO", "REMOTE", "SEGS", "LAG", "GAP", "LAST COPY",
            "LAST ERROR")
    rows = [cols]
    for key in sorted(st.partitions):
        p = st.partitions[key]
        remote = span(p.remote_start, p.remote_end + 1) if p.remote_end >= 0 else "-"
        rows.append(
            (
                key,
                p.role,
                str(log_start_of(p)),
                span(p.local_start, p.local_end),
                str(p.lso),
                remote,
                str(p.remote_segments),
                str(p.copy_lag),
                str(p.gap_offsets) if p.gap_offsets else "-",
                _ago(p.last_copy_ms, now),
                (p.last_error or "-")[:60],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    out += ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    carried = sorted(k for k, p in st.partitions.items() if p.note == CARRIED_NOTE)
    if carried and state != "stopped":
        out.append(f"{len(carried)} partition(s) shown as of the previous run: this run's first pass "
                   "has not looked at them yet")
    elif carried:
        out.append(f"{len(carried)} partition(s) shown as of an earlier run: the last run stopped before "
                   "looking at them")
    for key in sorted(st.partitions):
        p = st.partitions[key]
        if p.gaps:
            ranges = ", ".join(span(a, b + 1) for a, b in p.gaps[:5]) + (" ..." if len(p.gaps) > 5 else "")
            out.append(f"gaps {key}: {ranges} (never copied: deleted locally first)")
        if p.quarantined:
            held = ", ".join(
                f"{sid} {span(int(a), int(b) + 1)} (deleted in {_until(int(until), now)})"
                for sid, a, b, until in p.quarantined[:5]
            )
            more = " ..." if len(p.quarantined) > 5 else ""
            out.append(f"quarantined {key}: {held}{more}: off the epoch lineage, kept for the grace period")
        if p.compaction:  # the last remote compaction (docs/remote-compaction-job.md)
            c = p.compaction
            out.append(f"compacted {key}: {span(c['start_offset'], c['end_offset'] + 1)} from "
                       f"{c['segments_replaced']} segments, {c['bytes_before']} -> {c['bytes_after']} bytes, "
                       f"{c['records_removed']} records removed")
        if p.compaction_running:  # a remote compaction running now (rlm/daemon/compaction_progress.py)
            r = p.compaction_running
            out.append(f"compacting {key}: {span(r['start_offset'], r['end_offset'] + 1)} from "
                       f"{r['segments']} segments ({r['input_bytes']} bytes), {r['phase']}, "
                       f"{r['records_done']}/{r['records_total']} records mapped, {r['passes']} passes done, "
                       f"started {_ago(r['started_ms'], now)}")
    unprotected = unprotected_of(st)
    out += [f"ERROR {key}: {why}" for key, why in unprotected.items()]
    if unprotected:
        out.append(f"{len(unprotected)} partition(s) not protected (exit status {int(ExitCode.UNPROTECTED)})")
    if st.untiered:
        out.append("not tiered:")
        out += [f"  {topic}: {why_not}" for topic, why_not in sorted(st.untiered.items())]
    return "\n".join(out)


def unprotected_of(st: DaemonStatus) -> dict[str, str]:
    """Partition -> why the sidecar is not protecting it, in partition order (empty: all are)."""
    found = ((key, unprotected_reason(st.partitions[key])) for key in sorted(st.partitions))
    return {key: why for key, why in found if why is not None}


def exit_status(why_not_alive: str | None, unprotected: dict[str, str]) -> ExitCode:
    """1 for a dead or stale daemon (its partitions' state is old news), else 5 while any partition
    is not protected, else 0."""
    if why_not_alive:
        return ExitCode.FAILURE
    return ExitCode.UNPROTECTED if unprotected else ExitCode.OK


def iceberg_lags(work_dir: Path) -> list[dict[str, Any]]:
    """The lag files ``rlm iceberg`` writes after each pass (plain JSON: no Iceberg extra needed)."""
    out = []
    for path in sorted((Path(work_dir) / "iceberg" / "lag").glob("*.json")):
        try:
            out.append(dict(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue  # being replaced, or not ours
    return out


def render_iceberg(lags: list[dict[str, Any]], now: int) -> list[str]:
    if not lags:
        return []
    out = ["iceberg tables (behind the remote tier, as their writer last measured):"]
    for lag in lags:
        waiting = f", {lag['waiting']} waiting for their transactions" if lag.get("waiting") else ""
        last, measured = _ago(int(lag["last_commit_ms"]), now), _ago(int(lag["updated_ms"]), now)
        out.append(f"  {lag['table']} ({lag['topic']}): {lag['segments_behind']} segments / "
                   f"{lag['offsets_behind']} offsets behind{waiting}; {lag['segments']} segments, "
                   f"{lag['rows']} rows; last commit {last}, measured {measured}")
    return out


def status(args: argparse.Namespace) -> int:
    if args.work_dir is not None:
        work_dir = args.work_dir
    else:
        work_dir = (
            load_config(args.config).work_dir if args.config else load_config(None, log_dirs=[]).work_dir
        )
    st = read_status(work_dir)
    now = int(time.time() * 1000)
    state, why = liveness(st, now)
    lags = iceberg_lags(work_dir)
    unprotected = unprotected_of(st)
    if args.json:
        doc = asdict(st)
        doc["liveness"] = {"state": state, "alive": why is None and state != "stopped", "reason": why}
        doc["iceberg"] = lags
        doc["range_convention"] = "[start, end)"
        doc["unprotected"] = unprotected
        for key, part in doc["partitions"].items():
            part["ranges"] = ranges_of(st.partitions[key])
            part["protected"] = key not in unprotected
            part["unprotected_reason"] = unprotected.get(key)
        json.dump(doc, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print("\n".join([render_table(st, now), *render_iceberg(lags, now)]))
    return exit_status(why, unprotected)
