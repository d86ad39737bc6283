"""Kafka's own DumpLogSegments reads what encode_batch / encode_legacy_message_set write, byte-compatibly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlm.log import (
    Compression,
    ControlRecordType,
    TimestampType,
    encode_batch,
    encode_control_batch,
    iter_batches,
)
from rlm.log.encode import encode_legacy_message_set
from tests.services.kafka import dump_log_segments, dump_problems

TS = 1_700_000_000_000
# A record line; legacy records print "isValid: true crc: N}" where v2 ones print sequence and headerKeys.
LINE = re.compile(
    r"^\| offset: (\d+) (CreateTime|LogAppendTime|NoTimestampType): (-?\d+)"
    r" keySize: (-?\d+) valueSize: (-?\d+)"
    r"(?: sequence: (-?\d+) headerKeys: \[([^\]]*)\]| isValid: true crc: \d+\})"
    r"(?: endTxnMarker: (\w+) coordinatorEpoch: (\d+))?(?: key: (\S*))?(?: payload: (\S*))?$"
)


def _segment() -> tuple[bytes, list[tuple]]:  # type: ignore[type-arg]
    """Legacy entries, every v2 codec, a committed and an aborted transaction, LOG_APPEND_TIME."""
    data = bytearray()
    want: list[tuple] = []  # type: ignore[type-arg]
    off = 0
    for magic, codec in [
        (0, Compression.NONE),
        (0, Compression.LZ4),
        (1, Compression.GZIP),
        (1, Compression.LZ4),
        (1, Compression.SNAPPY),
    ]:
        recs = [(b"lk%d" % (off + i), b"lv%d" % (off + i), TS + i) for i in range(2)]
        data += encode_legacy_message_set(recs, magic=magic, base_offset=off, compression=codec)
        for i, (k, v, t) in enumerate(recs):
            kind = "CreateTime" if magic else "NoTimestampType"
            want.append((off + i, kind, t if magic else -1, k.decode(), v.decode(), "", None))
        off += 2
    for codec in Compression:
        recs = [
            (b"k%d" % (off + i), b"v%d" % (off + i), [("h1", b"x"), ("h2", None)], TS + 7 - i)
            for i in range(3)
        ]
        data += encode_batch(recs, base_offset=off, compression=codec, partition_leader_epoch=4)
        want += [
            (off + i, "CreateTime", t, k.decode(), v.decode(), "h1,h2", None)
            for i, (k, v, _, t) in enumerate(recs)
        ]
        off += 3
    for pid, marker in [(5, ControlRecordType.COMMIT), (6, ControlRecordType.ABORT)]:
        data += encode_batch(
            [(f"t{off}".encode(), None, [], TS)],
            base_offset=off,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
            compression=Compression.ZSTD,
        )
        want.append((off, "CreateTime", TS, f"t{off}", None, "", None))
        data += encode_control_batch(
            offset=off + 1,
            producer_id=pid,
            producer_epoch=0,
            control_type=marker,
            coordinator_epoch=2,
            timestamp=TS + 1,
        )
        want.append((off + 1, "CreateTime", TS + 1, None, None, "", marker.name))
        off += 2
    data += encode_batch(
        [(b"a", b"b", [], 5)],
        base_offset=off,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=TS + 9,
        compression=Compression.LZ4,
    )
    want.append((off, "LogAppendTime", TS + 9, "a", "b", "", None))
    return bytes(data), want


@pytest.mark.slow
def test_dump_log_segments_accepts_our_segment(tmp_path: Path) -> None:
    data, want = _segment()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    res = dump_log_segments(path, extra=("--deep-iteration", "--print-data-log"))
    assert dump_problems(res) == [], res.stdout + res.stderr
    batch_lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("baseOffset:", "offset:"))]
    assert len(batch_lines) == len(list(iter_batches(data)))
    assert all("isvalid: true" in ln for ln in batch_lines)
    assert sum("compresscodec: zstd" in ln for ln in batch_lines) == 3
    got = []
    for ln in res.stdout.splitlines():
        if ln.startswith("| offset:"):
            m = LINE.match(ln)
            assert m, ln
            got.append((int(m[1]), m[2], int(m[3]), m[10], m[11], m[7] or "", m[8]))
    assert got == want
