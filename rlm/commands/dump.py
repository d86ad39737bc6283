"""``rlm dump [--json] PATH...``: print Kafka partition-directory files, like ``kafka-dump-log.sh``.

The file type comes from the name: ``.log`` (one line per record; batch fields included),
``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot``, ``leader-epoch-checkpoint``,
``partition.metadata``, ``meta.properties``, the log-dir offset checkpoints and
``.kafka_cleanshutdown``. Offsets are absolute (index files take their base offset from the
name). With ``--json`` each line is one JSON object; bytes are base64. A corrupt or truncated
file stops the dump with exit status 1 and one line ``rlm: error: <path>: <position>: <what>``.
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlm.errors import CorruptRecordError, LogFormatError
from rlm.log import checkpoints as ckpt
from rlm.log import file_size, read_bytes, read_entry, scan_batches
from rlm.log.producer_snapshot import parse_snapshot
from rlm.log.record_json import TIMESTAMP_TYPE_NAMES as _TS_NAMES
from rlm.log.record_json import record_obj as _record_obj
from rlm.log.records import (
    BatchHeader,
    ControlRecord,
    Record,
    decode_control_records,
    decode_records,
)
from rlm.log.txn_index import parse_txn_index

Obj = dict[str, Any]
_TEMP_SUFFIX = re.compile(r"\.(deleted|cleaned|swap)$")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("dump", help="print Kafka log, index, snapshot and checkpoint files",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files, or directories of them")
    p.set_defaults(func=dump)


def _base_offset(path: Path) -> int:
    m = re.match(r"^(\d+)\.", path.name)
    if not m:
        raise LogFormatError("cannot tell the segment base offset from the file name", path=path, position=0)
    return int(m.group(1))


# ---- .log --------------------------------------------------------------------------------------
def _decode(path: Path, h: BatchHeader) -> list[Record] | list[ControlRecord]:
    data = read_entry(path, h)
    try:
        if h.is_control:
            return decode_control_records(data, path=str(path), position=h.position)
        return decode_records(data, path=str(path), position=h.position)
    except LogFormatError:
        raise
    except (ValueError, struct.error, IndexError, OverflowError, UnicodeDecodeError, MemoryError) as e:
        raise CorruptRecordError(f"cannot decode batch: {e}", path=str(path), position=h.position) from e


def _log(path: Path, as_json: bool) -> Iterator[str]:
    end = 0
    for h in scan_batches(path):
        end = h.end_position
        records = _decode(path, h)
        if as_json:
            yield from (json.dumps(_record_obj(h, r)) for r in records)
            continue
        yield (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
               f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
               f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
               f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
               f"position: {h.position} {_TS_NAMES[h.timestamp_type]}: {h.max_timestamp} size: {h.size} "
               f"magic: {h.magic} compresscodec: {h.compression.name.lower()} crc: {h.crc} isvalid: true")
        for r in records:
            if isinstance(r, ControlRecord):
                kind = r.type.name if hasattr(r.type, "name") else r.type
                yield f"| offset: {r.offset} {kind} coordinatorEpoch: {r.coordinator_epoch}"
            else:
                yield (f"| offset: {r.offset} {_TS_NAMES[r.timestamp_type]}: {r.timestamp} "
                       f"keySize: {-1 if r.key is None else len(r.key)} "
                       f"valueSize: {-1 if r.value is None else len(r.value)} "
                       f"headerKeys: [{','.join(k for k, _ in r.headers)}]")
    size = file_size(path)
    if end < size:
        raise CorruptRecordError(f"{size - end} bytes at the end do not form a complete batch (truncated)",
                                 path=str(path), position=end)


# ---- other files -------------------------------------------------------------------------------
def _objects(path: Path) -> Iterator[Obj]:
    name = _TEMP_SUFFIX.sub("", path.name)
    p = str(path)
    if name.endswith(".index"):
        from rlm.log.offset_index import parse_offset_index  # numpy: only when an index is dumped

        for e in parse_offset_index(read_bytes(path), _base_offset(path), path=p).entries():
            yield {"offset": e.offset, "position": e.position}
    elif name.endswith(".timeindex"):
        from rlm.log.time_index import parse_time_index

        for t in parse_time_index(read_bytes(path), _base_offset(path), path=p).entries():
            yield {"timestamp": t.timestamp, "offset": t.offset}
    elif name.endswith(".txnindex"):
        for a in parse_txn_index(read_bytes(path), base_offset=_base_offset(path), path=p):
            yield {"producer_id": a.producer_id, "first_offset": a.first_offset, "last_offset": a.last_offset,
                   "last_stable_offset": a.last_stable_offset}
    elif name.endswith(".snapshot"):
        for s in parse_snapshot(read_bytes(path), path=p):
            yield {"producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                   "last_sequence": s.last_sequence, "last_offset": s.last_offset,
                   "offset_delta": s.offset_delta,
                   "timestamp": s.timestamp, "coordinator_epoch": s.coordinator_epoch,
                   "current_txn_first_offset": s.current_txn_first_offset}
    elif name == ckpt.LEADER_EPOCH_CHECKPOINT:
        for ep in ckpt.parse_leader_epoch_checkpoint(read_bytes(path), path=p):
            yield {"epoch": ep.epoch, "start_offset": ep.start_offset}
    elif name == ckpt.PARTITION_METADATA:
        yield {"version": 0, "topic_id": ckpt.parse_partition_metadata(read_bytes(path), path=p).text}
    elif name == ckpt.META_PROPERTIES:
        yield dict(sorted(ckpt.parse_meta_properties(read_bytes(path), path=p).to_properties().items()))
    elif name in ckpt.LOG_DIR_CHECKPOINTS:
        for tp, off in ckpt.parse_offset_checkpoint(read_bytes(path), path=p).items():
            yield {"topic": tp.topic, "partition": tp.partition, "offset": off}
    elif name == ckpt.CLEAN_SHUTDOWN:
        yield {"broker_epoch": ckpt.parse_clean_shutdown(read_bytes(path), path=p)}
    else:
        raise LogFormatError("unknown file type (expected .log, .index, .timeindex, .txnindex, .snapshot, "
                             "a checkpoint or metadata file)", path=p, position=0)


def _text(obj: Obj) -> str:
    return " ".join(f"{k}: {v}" for k, v in obj.items())


def dump_lines(path: Path, *, as_json: bool) -> Iterator[str]:
    """The output lines for one file; raises :class:`LogFormatError` at the first problem."""
    if _TEMP_SUFFIX.sub("", path.name).endswith(".log"):
        yield from _log(path, as_json)
        return
    render: Callable[[Obj], str] = json.dumps if as_json else _text
    for obj in _objects(path):
        yield render(obj)


def _expand(paths: list[Path]) -> Iterator[Path]:
    """Files as given; a directory stands for the files in it this command knows, sorted."""
    for path in paths:
        if path.is_dir():
            yield from sorted(f for f in path.iterdir() if f.is_file() and _known(f))
        else:
            yield path


def _known(path: Path) -> bool:
    name = path.name
    return name.endswith((".log", ".index", ".timeindex", ".txnindex", ".snapshot")) or name in (
        ckpt.LEADER_EPOCH_CHECKPOINT, ckpt.PARTITION_METADATA, ckpt.META_PROPERTIES, ckpt.CLEAN_SHUTDOWN,
        *ckpt.LOG_DIR_CHECKPOINTS)


def dump(args: argparse.Namespace) -> int:
    out = sys.stdout
    for path in _expand(args.paths):
        if not args.json:
            out.write(f"Dumping {path}\n")
        for line in dump_lines(path, as_json=args.json):
            out.write(line + "\n")
    out.flush()
    return 0
