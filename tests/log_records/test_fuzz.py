"""Property tests: round trips; random, truncated and bit-flipped input gives typed errors only."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
from aiokafka.record._crecords import DefaultRecordBatch as AioBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.errors import LogFormatError
from rlm.log import Compression, Record, TimestampType, decode_records, encode_batch, iter_batches, read_arrow
from rlm.log._arrow_build import KAFKA_SCHEMA, records_batch
from rlm.log.records import iter_records
from tests.log_records._data import legacy_log, mixed_log

FUZZ = settings(
    max_examples=int(os.environ.get("RLM_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
MIXED, _ = mixed_log()
LEGACY, _ = legacy_log()

blobs = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=40)))
record = st.tuples(
    blobs, blobs, st.lists(header, max_size=4), st.integers(min_value=-(2**40), max_value=2**42)
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, list[Record]]:
    records = draw(st.lists(record, min_size=1, max_size=30))
    gaps = draw(
        st.lists(st.integers(min_value=1, max_value=1000), min_size=len(records), max_size=len(records))
    )
    deltas = [sum(gaps[:i]) for i in range(len(records))]
    base = draw(st.integers(min_value=0, max_value=2**50))
    codec = draw(st.sampled_from(list(Compression)))
    append = draw(st.booleans())
    lat = draw(st.integers(min_value=0, max_value=2**42)) if append else None
    batch = encode_batch(
        records,
        base_offset=base,
        compression=codec,
        offset_deltas=deltas,
        timestamp_type=TimestampType.LOG_APPEND_TIME if append else TimestampType.CREATE_TIME,
        log_append_time=lat,
        producer_id=draw(st.integers(-1, 2**40)),
        partition_leader_epoch=draw(st.integers(0, 2**31 - 1)),
    )
    expected = [
        Record(
            base + d,
            lat if append else t,
            TimestampType.LOG_APPEND_TIME if append else TimestampType.CREATE_TIME,
            k,
            v,
            tuple(h),
        )
        for (k, v, h, t), d in zip(records, deltas, strict=True)
    ]
    return batch, expected


@FUZZ
@given(batches())
def test_round_trip(case: tuple[bytes, list[Record]]) -> None:
    batch, expected = case
    assert decode_records(batch) == expected
    table = read_arrow(batch, topic="fz", partition=1)
    assert table.equals(pa.Table.from_batches([records_batch("fz", 1, expected)], schema=KAFKA_SCHEMA))
    theirs = AioBatch(batch)
    assert theirs.validate_crc()
    assert [(r.offset, r.key, r.value) for r in theirs] == [(r.offset, r.key, r.value) for r in expected]


def _outcome(fn, *args, **kw):  # type: ignore[no-untyped-def]
    """Result of ``fn`` or the *type* of the LogFormatError it raised; anything else propagates."""
    try:
        return fn(*args, **kw)
    except LogFormatError as e:
        return type(e)


def _everything(data: bytes, verify_crc: bool) -> None:
    _outcome(lambda: list(iter_batches(data, verify_crc=verify_crc)))
    _outcome(lambda: list(iter_records(data, verify_crc=verify_crc)))
    _outcome(decode_records, data, verify_crc=verify_crc)
    jit = _outcome(read_arrow, data, topic="t", partition=0, verify_crc=verify_crc, pure_python=False)
    if len(data) < 3000:
        pure = _outcome(read_arrow, data, topic="t", partition=0, verify_crc=verify_crc, pure_python=True)
        assert (
            jit.equals(pure)
            if isinstance(jit, pa.Table) and isinstance(pure, pa.Table)
            else isinstance(jit, type) and isinstance(pure, type)
        )


@FUZZ
@given(st.binary(max_size=2000), st.booleans())
def test_random_bytes(data: bytes, verify_crc: bool) -> None:
    _everything(data, verify_crc)


@FUZZ
@given(st.sampled_from([MIXED, LEGACY]), st.data())
def test_truncations(source: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(source)))
    truncated = source[:cut]
    complete = [h for h in iter_batches(source) if h.end_position <= cut]
    assert list(iter_batches(truncated)) == complete  # a partial tail ends the walk silently
    _everything(truncated, True)


@FUZZ
@given(st.sampled_from([MIXED, LEGACY]), st.data(), st.booleans())
def test_bit_flips(source: bytes, data: st.DataObject, verify_crc: bool) -> None:
    flipped = bytearray(source)
    for _ in range(data.draw(st.integers(1, 3))):
        bit = data.draw(st.integers(0, len(source) * 8 - 1))
        flipped[bit // 8] ^= 1 << (bit % 8)
    _everything(bytes(flipped), verify_crc)
    if verify_crc:  # whatever decodes must be well-formed
        table = _outcome(read_arrow, bytes(flipped), topic="t", partition=0)
        if isinstance(table, pa.Table):
            table.validate(full=True)


@FUZZ
@given(st.data(), st.booleans())
def test_header_field_corruption(data: st.DataObject, verify_crc: bool) -> None:
    headers = list(iter_batches(MIXED))
    h = data.draw(st.sampled_from(headers))
    corrupted = bytearray(MIXED)
    for _ in range(data.draw(st.integers(1, 4))):
        at = h.position + data.draw(st.integers(0, 60))
        corrupted[at] = data.draw(st.integers(0, 255))
    _everything(bytes(corrupted), verify_crc)
    entry = bytes(corrupted[h.position : h.end_position])
    _outcome(decode_records, entry, verify_crc=verify_crc)


def test_env_var_disables_jit() -> None:
    code = (
        "import rlm.log._kernel as k, rlm.log as l; assert k.PURE; "
        "b = l.encode_batch([(b'k', b'v', [('h', None)], 1)], base_offset=5); "
        "t = l.read_arrow(b, topic='t', partition=0); "
        "assert t.column('offset').to_pylist() == [5]; print('ok')"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "RLM_DISABLE_JIT": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.stdout.strip() == "ok", res.stderr
