"""``rlm fetch``: read tiered records back from remote storage, by offset or by time.

    rlm fetch --config F --topic T --partition P (--offset N | --timestamp TS)
              [--count K | --until-offset N | --until-timestamp TS]
              [--isolation read_committed] [--format json|text|raw|arrow]

``json`` prints one object per record with the fields and encoding of ``rlm dump --json``
(key, value and header values base64); control records are not printed (a consumer never sees
them) and ``read_committed`` leaves out aborted records. ``text`` prints one line per record as
``kcat`` does (partition, offset, ISO-8601 timestamp, key, headers, value; UTF-8 where it decodes,
escaped otherwise: see ``rlm.commands.record_text``). ``raw`` writes Kafka's record-batch
bytes exactly as stored (whole batches: the first holds the start offset and may begin before
it; with ``read_committed`` aborted and control batches are left out). ``arrow`` writes an
Arrow IPC stream with Spark's Kafka schema. ``--until-*`` ends are exclusive; ``--timestamp``
and ``--until-timestamp`` map to the first offset whose timestamp is >= TS (KIP-33).

Only remote data is read: an offset outside the remote range is a runtime failure (exit status 1,
see the table below) and the message names the valid range as ``[start, end)``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, BinaryIO

from fetcher.isolation import IsolationLevel
from rlm.commands.readside import (
    CLI_TIMEOUT_MS,
    Progress,
    add_config_arg,
    lookup,
    open_fetcher,
    parse_timestamp,
)
from rlm.commands.record_text import record_line
from rlm.log.model import BatchHeader, Record
from rlm.log.record_json import record_obj
from rlm.log.records import iter_batches

if TYPE_CHECKING:  # the read core loads when the command runs, not for `rlm --help`
    from fetcher import FetchResult, RemoteFetcher

_FETCH_BYTES = 1 << 20


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("fetch", help="read tiered records from remote storage",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", "-p", type=int, default=0)
    start = p.add_mutually_exclusive_group(required=True)
    start.add_argument("--offset", type=int, help="first offset to read")
    start.add_argument("--timestamp", type=parse_timestamp,
                       help="start at the first record with timestamp >= TS (ISO-8601, epoch ms, 2h-ago)")
    end = p.add_mutually_exclusive_group()
    end.add_argument("--count", type=int, help="stop after K records")
    end.add_argument("--until-offset", type=int, help="stop before this offset")
    end.add_argument("--until-timestamp", type=parse_timestamp,
                     help="stop before the first record with timestamp >= TS")
    p.add_argument("--isolation", choices=("read_uncommitted", "read_committed"), default="read_uncommitted")
    p.add_argument("--format", choices=("json", "text", "raw", "arrow"), default="json")
    p.add_argument("--leader-epoch", type=int, help="the reader's leader epoch (fenced if it ended before)")
    p.add_argument("--bootstrap-server", help="override the config's bootstrap_servers (timestamp lookups)")
    p.set_defaults(func=fetch)


def resolve_range(f: RemoteFetcher, args: argparse.Namespace) -> tuple[int, int] | None:
    """``[start, end)`` in offsets (end capped at the remote end); ``None`` when no record is
    as late as ``--timestamp``."""
    plan = f.plan(args.topic, args.partition)
    if args.offset is not None:
        start = int(args.offset)
    else:
        a = lookup(f, args.topic, args.partition, args.timestamp)
        if a is None:
            return None
        start = a.offset
    end = plan.log_end
    if args.until_offset is not None:
        end = min(end, int(args.until_offset))
    elif args.until_timestamp is not None:
        a = lookup(f, args.topic, args.partition, args.until_timestamp)
        if a is not None:
            end = min(end, a.offset)
    return start, end


def fetches(f: RemoteFetcher, args: argparse.Namespace, start: int, end: int) -> Iterator[FetchResult]:
    """Consecutive remote reads from ``start`` until a result reaches ``end`` (or the remote end)."""
    level = IsolationLevel.parse(args.isolation)
    offset = start
    first = True
    while offset < end:
        r = f.fetch(args.topic, args.partition, offset, max_bytes=_FETCH_BYTES, isolation=level,
                    leader_epoch=args.leader_epoch if first else None,
                    drop_aborted=level is IsolationLevel.READ_COMMITTED, sequential=True,
                    timeout_ms=CLI_TIMEOUT_MS)
        first = False
        if r.next_offset <= offset:
            lso = r.last_stable_offset
            if lso is not None and offset >= lso and r.stable_limited:
                print(f"rlm: {args.topic}-{args.partition}: read_committed stops at the remote last stable "
                      f"offset {lso} (a transaction open there is decided by records not tiered yet; "
                      "configure the broker's log_dirs to read past it)",
                      file=sys.stderr)
            return
        yield r
        offset = r.next_offset


def _json(f: RemoteFetcher, args: argparse.Namespace, start: int, end: int, progress: Progress) -> int:
    import json

    return _lines(f, args, start, end, progress, lambda h, rec: json.dumps(record_obj(h, rec)))


def _text(f: RemoteFetcher, args: argparse.Namespace, start: int, end: int, progress: Progress) -> int:
    return _lines(f, args, start, end, progress, lambda h, rec: record_line(args.partition, rec))


def _lines(f: RemoteFetcher, args: argparse.Namespace, start: int, end: int, progress: Progress,
           render: Callable[[BatchHeader, Record], str]) -> int:
    """One line per data record in ``[start, end)`` (at most ``--count``); returns how many."""
    out = sys.stdout
    n = 0
    for r in fetches(f, args, start, end):
        for h, rec in r.data_records(start):
            if rec.offset >= end or (args.count is not None and n >= args.count):
                return n
            out.write(render(h, rec) + "\n")
            n += 1
        progress.update(f"{n} records, offset {r.next_offset}")
        if args.count is not None and n >= args.count:
            break
    return n


def _raw(f: RemoteFetcher, args: argparse.Namespace, start: int, end: int, progress: Progress) -> int:
    out: BinaryIO = sys.stdout.buffer
    n = 0
    total = 0
    for r in fetches(f, args, start, end):
        data = memoryview(r.records)
        for h in iter_batches(data, verify_crc=False):
            if h.base_offset >= end or (args.count is not None and n >= args.count):
                return n
            out.write(data[h.position:h.end_position])
            total += h.size
            if not h.is_control:
                n += h.last_offset + 1 - max(h.base_offset, start)
        progress.update(f"{total} bytes, offset {r.next_offset}")
    out.flush()
    return n


def _arrow(f: RemoteFetcher, args: argparse.Namespace, start: int, end: int, progress: Progress) -> int:
    import pyarrow as pa

    from rlm.log import KAFKA_SCHEMA

    n = 0
    with pa.ipc.new_stream(sys.stdout.buffer, KAFKA_SCHEMA) as w:
        for batch in f.scan(args.topic, args.partition, start_offset=start, end_offset=end,
                            isolation=args.isolation):
            if args.count is not None:
                batch = batch.slice(0, max(0, args.count - n))
            if batch.num_rows:
                w.write_batch(batch)
                n += batch.num_rows
            progress.update(f"{n} records")
            if args.count is not None and n >= args.count:
                break
    return n


def fetch(args: argparse.Namespace) -> int:
    progress = Progress(f"fetch {args.topic}-{args.partition}")
    with open_fetcher(args.config, args.bootstrap_server) as f:
        rng = resolve_range(f, args)
        if rng is None:
            print(f"rlm: no record of {args.topic}-{args.partition} has a timestamp >= {args.timestamp}",
                  file=sys.stderr)
            return 0
        start, end = rng
        plan = f.plan(args.topic, args.partition)
        if args.offset is None and start >= plan.log_end:
            print(f"rlm: {args.topic}-{args.partition}: the first record at or after that time is offset "
                  f"{start}, past the remote end {plan.log_end}: the broker serves it", file=sys.stderr)
            return 0
        plan.index_of(start)  # outside the remote range → OffsetOutOfRangeError, exit 1
        writer = {"json": _json, "text": _text, "raw": _raw, "arrow": _arrow}[args.format]
        try:
            writer(f, args, start, end, progress)
        finally:
            progress.done()
    sys.stdout.flush()
    return 0
