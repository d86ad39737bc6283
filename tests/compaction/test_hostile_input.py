"""Damaged segments (data, transactional and control batches) never crash the engine: random
byte changes (with the batch CRC fixed up, so they reach the record parsers and the compiled
re-framing loop) end in a compacted result or in a typed error of the project's tree, never in
another exception or a crash of the process."""

from __future__ import annotations

import struct

import google_crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.compaction import CompactionInput, NewerKeys, compact_to_batches
from rlm.errors import RlmError
from rlm.log import Compression, ControlRecordType, iter_batches
from rlm.log.encode import encode_batch, encode_control_batch
from rlm.log.txn_index import AbortedTxn

NOW = 1_800_000_000_000


def valid_segment() -> bytes:
    out, offset = [], 0
    for i, codec in enumerate([Compression.NONE, Compression.ZSTD, Compression.NONE, Compression.GZIP]):
        recs = [(b"k%d" % (j % 3), None if j == 2 else b"v%d-%d" % (i, j), [("h", b"x")], NOW - 100 + j)
                for j in range(4)]
        out.append(encode_batch(recs, base_offset=offset, compression=codec, producer_id=2, producer_epoch=0,
                                base_sequence=offset))
        offset += 4
    out.append(encode_batch([(b"k1", b"aborted", None, NOW)], base_offset=offset, producer_id=5,
                            producer_epoch=0, base_sequence=0, is_transactional=True))
    out.append(encode_control_batch(offset=offset + 1, producer_id=5, producer_epoch=0,
                                    control_type=ControlRecordType.ABORT, coordinator_epoch=0, timestamp=NOW))
    return b"".join(out)


SEGMENT = valid_segment()
ABORTED = [AbortedTxn(producer_id=5, first_offset=16, last_offset=17, last_stable_offset=18)]
STARTS = [h.position for h in iter_batches(SEGMENT)]


def fix_crcs(data: bytearray) -> bytes:
    pos = 0
    while pos + 61 <= len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        end = pos + 12 + length
        if length < 49 or end > len(data):
            break
        struct.pack_into(">I", data, pos + 17, google_crc32c.value(bytes(data[pos + 21:end])))
        pos = end
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(SEGMENT) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       st.booleans(), st.booleans())
def test_damaged_segments_give_typed_errors(changes: list[tuple[int, int]], keep_crc: bool,
                                            newer: bool) -> None:
    data = bytearray(SEGMENT)
    for pos, value in changes:
        data[pos] = value
    damaged = bytes(data) if keep_crc else fix_crcs(data)
    newer_keys = NewerKeys.from_keys([b"k1"]) if newer else None
    inp = CompactionInput([damaged], aborted=ABORTED, newer_keys=newer_keys)
    try:
        batches, result = compact_to_batches(inp, now_ms=NOW)
    except RlmError:
        return
    for b in batches:  # what comes out parses
        list(iter_batches(b))
    assert result.records_kept <= result.records_read
