"""Kafka's small text files: checkpoints, ``partition.metadata``, ``meta.properties``, clean shutdown.

All are UTF-8 with ``\\n`` line ends. The generic checkpoint (``CheckpointFile``) is
``<version>\\n<count>\\n`` then ``count`` entry lines split on whitespace; Kafka requires the
exact version and exactly ``count`` entries (an empty file means no entries). Readers here
are as strict as Kafka's and stricter where Kafka's writer guarantees more (epochs and start
offsets strictly increase), so damage is reported as :class:`CheckpointFormatError` with the
byte position of the offending line, never silently used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rlm.errors import CheckpointFormatError, LogFileGoneError
from rlm.log._fileio import read_bytes
from rlm.types import ZERO_UUID, KafkaUuid, TopicPartition

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LOG_DIR_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT,
                       CLEANER_OFFSET_CHECKPOINT)

_INT = re.compile(r"^[+-]?[0-9]+$")
_WS = re.compile(r"\s+")
_UUID_TEXT = re.compile(r"^[A-Za-z0-9_-]{22}$")
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """A ``leader-epoch-checkpoint`` line: ``epoch`` started at ``start_offset``."""

    epoch: int
    start_offset: int


# ---- generic checkpoint ----------------------------------------------------------------------
def _lines(data: bytes, path: str | None) -> list[tuple[int, str]]:
    """(byte position, text) per line, splitting like Java's ``readLine`` (\\n, \\r\\n or \\r)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointFormatError(f"not UTF-8: {e.reason}", path=path, position=e.start) from e
    if text == "":
        return []
    parts = re.split(r"(\r\n|\r|\n)", text)
    out, pos = [], 0
    for i in range(0, len(parts), 2):
        out.append((pos, parts[i]))
        pos += len(parts[i].encode()) + (len(parts[i + 1]) if i + 1 < len(parts) else 0)
    if out[-1][1] == "" and len(parts) > 1:
        out.pop()
    return out


def _parse_int(token: str, bounds: tuple[int, int], what: str, path: str | None, pos: int) -> int:
    if not _INT.match(token) or not bounds[0] <= int(token) <= bounds[1]:
        raise CheckpointFormatError(f"malformed {what} {token!r}", path=path, position=pos)
    return int(token)


def parse_checkpoint(data: bytes, *, version: int, fields: int,
                     path: str | Path | None = None) -> list[tuple[int, list[str]]]:
    """Generic ``CheckpointFile`` parse: (byte position, whitespace-split fields) per entry line."""
    where = str(path) if path is not None else None
    lines = _lines(data, where)
    if not lines:
        return []
    pos, line = lines[0]
    got = _parse_int(line, INT32, "version line", where, pos)
    if got != version:
        raise CheckpointFormatError(f"unrecognised version {got}, expected {version}",
                                    path=where, position=pos)
    if len(lines) == 1:
        return []
    pos, line = lines[1]
    count = _parse_int(line, (0, INT32[1]), "entry count line", where, pos)
    entries = []
    for pos, line in lines[2:]:
        parts = _WS.split(line)
        if len(parts) != fields:
            raise CheckpointFormatError(f"malformed line {line!r}", path=where, position=pos)
        entries.append((pos, parts))
    if len(entries) != count:
        raise CheckpointFormatError(f"expected {count} entries, found {len(entries)}", path=where,
                                    position=len(data))
    return entries


def encode_checkpoint(version: int, lines: Iterable[str]) -> bytes:
    rows = list(lines)
    return "".join(f"{x}\n" for x in [str(version), str(len(rows)), *rows]).encode()


# ---- leader-epoch-checkpoint -----------------------------------------------------------------
def parse_leader_epoch_checkpoint(data: bytes, *, path: str | Path | None = None) -> list[EpochEntry]:
    where = str(path) if path is not None else None
    out: list[EpochEntry] = []
    for pos, (e, o) in parse_checkpoint(data, version=0, fields=2, path=where):
        entry = EpochEntry(_parse_int(e, (0, INT32[1]), "epoch", where, pos),
                           _parse_int(o, (0, INT64[1]), "start offset", where, pos))
        if out and (entry.epoch <= out[-1].epoch or entry.start_offset <= out[-1].start_offset):
            raise CheckpointFormatError(f"entry {entry.epoch} {entry.start_offset} does not increase after "
                                        f"{out[-1].epoch} {out[-1].start_offset}", path=where, position=pos)
        out.append(entry)
    return out


def read_leader_epoch_checkpoint(path: str | Path) -> list[EpochEntry]:
    return parse_leader_epoch_checkpoint(read_bytes(path), path=path)


def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    return encode_checkpoint(0, (f"{e.epoch} {e.start_offset}" for e in entries))


# ---- log-dir offset checkpoints ----------------------------------------------------------------
def parse_offset_checkpoint(data: bytes, *, path: str | Path | None = None) -> dict[TopicPartition, int]:
    """``recovery-point-``, ``log-start-``, ``replication-`` or ``cleaner-offset-checkpoint``."""
    where = str(path) if path is not None else None
    out: dict[TopicPartition, int] = {}
    for pos, (topic, part, off) in parse_checkpoint(data, version=0, fields=3, path=where):
        tp = TopicPartition(topic, _parse_int(part, (0, INT32[1]), "partition", where, pos))
        out[tp] = _parse_int(off, INT64, "offset", where, pos)
    return out


def read_offset_checkpoint(path: str | Path, *, missing_ok: bool = True) -> dict[TopicPartition, int]:
    """A missing file is an empty checkpoint when ``missing_ok`` (Kafka creates it empty)."""
    try:
        data = read_bytes(path)
    except LogFileGoneError:
        if missing_ok:
            return {}
        raise
    return parse_offset_checkpoint(data, path=path)


def encode_offset_checkpoint(offsets: Mapping[TopicPartition, int]) -> bytes:
    return encode_checkpoint(0, (f"{tp.topic} {tp.partition} {off}" for tp, off in offsets.items()))


# ---- partition.metadata ------------------------------------------------------------------------
def parse_uuid(text: str, *, path: str | None = None, position: int = 0) -> KafkaUuid:
    """Kafka ``Uuid.fromString`` text, strictly: 22 base64url characters that round-trip."""
    if not _UUID_TEXT.match(text):
        raise CheckpointFormatError(f"malformed uuid {text!r}", path=path, position=position)
    u = KafkaUuid.from_text(text)
    if u.text != text:
        raise CheckpointFormatError(f"non-canonical uuid {text!r}", path=path, position=position)
    return u


def parse_partition_metadata(data: bytes, *, path: str | Path | None = None) -> KafkaUuid:
    """``version: 0\\ntopic_id: <uuid>`` (``PartitionMetadataFile``); returns the topic id."""
    where = str(path) if path is not None else None
    lines = _lines(data, where)
    if len(lines) != 2:
        raise CheckpointFormatError(f"expected 2 lines, found {len(lines)}", path=where, position=0)
    (vpos, vline), (tpos, tline) = lines
    v = re.split(r":\s+", vline)
    if len(v) != 2 or v[0] != "version":
        raise CheckpointFormatError(f"malformed version line {vline!r}", path=where, position=vpos)
    if _parse_int(v[1], INT32, "version", where, vpos) != 0:
        raise CheckpointFormatError(f"unrecognised version {v[1]}", path=where, position=vpos)
    t = re.split(r":\s+", tline)
    if len(t) != 2 or t[0] != "topic_id":
        raise CheckpointFormatError(f"malformed topic_id line {tline!r}", path=where, position=tpos)
    topic_id = parse_uuid(t[1], path=where, position=tpos)
    if topic_id == ZERO_UUID:
        raise CheckpointFormatError("topic id is the zero uuid", path=where, position=tpos)
    return topic_id


def read_partition_metadata(path: str | Path) -> KafkaUuid:
    return parse_partition_metadata(read_bytes(path), path=path)


def encode_partition_metadata(topic_id: KafkaUuid) -> bytes:
    """Exactly what ``PartitionMetadata.encode`` writes: no trailing newline."""
    return f"version: 0\ntopic_id: {topic_id.text}".encode()


# ---- meta.properties ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MetaProperties:
    """A log dir's ``meta.properties`` (``MetaProperties``): v1 is KRaft, v0 the ZooKeeper era."""

    version: int
    cluster_id: str | None
    node_id: int
    directory_id: KafkaUuid | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    def to_properties(self) -> dict[str, str]:
        props = dict(self.extra)
        props["version"] = str(self.version)
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        props["node.id" if self.version >= 1 else "broker.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id.text
        return props


_PROP_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.match(r"[0-9a-fA-F]{4}", s[i + 2:i + 6]):
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_PROP_ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(data: bytes, *, path: str | Path | None = None) -> dict[str, str]:
    """Java ``Properties.load`` for the subset Kafka writes (comments, ``k=v``/``k:v``, escapes,
    continuation lines)."""
    where = str(path) if path is not None else None
    props: dict[str, str] = {}
    pending = ""
    for _pos, line in _lines(data, where):
        line = pending + line.lstrip() if pending else line.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        pending = ""
        m = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:]?\s*(.*)$", line, re.S)
        key, value = (m.group(1), m.group(2)) if m else (line, "")
        props[_unescape(key)] = _unescape(value)
    return props


def parse_meta_properties(data: bytes, *, path: str | Path | None = None) -> MetaProperties:
    where = str(path) if path is not None else None
    props = parse_properties(data, path=where)

    def need_int(key: str) -> int:
        if key not in props:
            raise CheckpointFormatError(f"missing {key}", path=where, position=0)
        return _parse_int(props[key], INT32, key, where, 0)

    version = need_int("version")
    if version not in (0, 1):
        raise CheckpointFormatError(f"unsupported meta.properties version {version}", path=where, position=0)
    node_id = need_int("node.id" if version == 1 else "broker.id")
    if version == 1 and "cluster.id" not in props:
        raise CheckpointFormatError("missing cluster.id", path=where, position=0)
    dir_id = parse_uuid(props["directory.id"], path=where) if "directory.id" in props else None
    known = {"version", "cluster.id", "node.id", "broker.id", "directory.id"}
    return MetaProperties(version, props.get("cluster.id"), node_id, dir_id,
                          {k: v for k, v in props.items() if k not in known})


def read_meta_properties(path: str | Path) -> MetaProperties:
    return parse_meta_properties(read_bytes(path), path=path)


def _escape(s: str, *, key: bool) -> str:
    out = []
    for i, c in enumerate(s):
        if c in "\\=:#!" or (c == " " and (key or i == 0)):
            out.append("\\" + c)
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        else:
            out.append(c)
    return "".join(out)


def encode_meta_properties(meta: MetaProperties, *, date_comment: str = "") -> bytes:
    """``Properties.store`` text: a ``#`` comment line, a date comment, then ``key=value`` lines."""
    lines = ["#", f"#{date_comment}"]
    props = sorted(meta.to_properties().items())
    lines += [f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in props]
    return ("\n".join(lines) + "\n").encode()


# ---- .kafka_cleanshutdown ---------------------------------------------------------------------
def has_clean_shutdown(log_dir: str | Path) -> bool:
    """Whether the broker left this log dir after a clean shutdown (it will skip recovery)."""
    return (Path(log_dir) / CLEAN_SHUTDOWN).is_file()


def parse_clean_shutdown(data: bytes, *, path: str | Path | None = None) -> int:
    """The broker epoch recorded in ``.kafka_cleanshutdown``; -1 for an empty (pre-KIP-966) file."""
    where = str(path) if path is not None else None
    if not data.strip():
        return -1
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointFormatError(f"not JSON: {e}", path=where, position=0) from e
    if not isinstance(obj, dict) or obj.get("version") != 0 or not isinstance(obj.get("brokerEpoch"), int):
        raise CheckpointFormatError("expected {\"version\":0,\"brokerEpoch\":N}", path=where, position=0)
    return int(obj["brokerEpoch"])


def encode_clean_shutdown(broker_epoch: int = -1) -> bytes:
    return json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":")).encode()
