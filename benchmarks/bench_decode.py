"""Decode benchmark: rlm.log.read_arrow vs aiokafka's compiled parser vs kafka-python (not a test).

Writes a partition segment of ``--size-mb`` of realistic records with :func:`rlm.log.encode_batch`,
once per codec (``--codecs``: uncompressed, zstd, lz4, snappy, gzip): every batch distinct (no
repeated content), ~16 KiB producer batches, keys ``user-<id>`` (5 % null), JSON event values of
60-700 bytes (with a random text field, so zstd compresses them as it does real payloads, ~3x),
0-3 headers per record (``trace-id``, ``content-type``, ``source``), increasing timestamps. Then,
per codec, in
interleaved rounds (one warm-up, then ``--rounds``):

* ``rlm.log.read_arrow`` of the file's bytes in memory to a ``pyarrow.Table``, CRC-32C of every
  batch verified: the same input every other case gets (before 2026-11-29 it read the file, a
  ``pread`` copy of every byte none of the others made, ~10 % of a snappy decode);
* ``rlm.log.read_arrow`` of the file itself (context: what reading it adds);
* aiokafka's Cython ``aiokafka.record._crecords.MemoryRecords`` over the same bytes (builds one
  Python object per record; no CRC check), touching offset, timestamp, key, value, headers;
* for zstd, decompression of every batch payload alone (``zstandard`` with one reused context,
  and libzstd's one-shot ``ZSTD_decompressDCtx`` from a compiled loop): the floor of any decoder;
  for lz4, snappy and gzip likewise, one library call per batch (per xerial block for snappy)
  into one reused buffer (cramjam; zlib for gzip, faster than cramjam's here), and for gzip also
  libdeflate's one-shot ``libdeflate_gzip_decompress_ex`` from a compiled loop (what the decoder
  calls; a floor of its own, since it inflates ~2x faster than zlib);

and, on the first ``--baseline-mb``, ``read_arrow`` against kafka-python's pure-Python
``kafka.record.MemoryRecords``. After every case (untimed) the decoders' records — offsets, keys,
values (null distinct from empty) and headers — are digested; every decoder's digest must equal
kafka-python's decoding of the same bytes (the reference, run once on the whole file, untimed) in
every round, or the benchmark fails (exit 2); where kafka-python cannot decode the codec (lz4 and
snappy need packages this project does not install) the reference is the digest of the records the
generator wrote, and there is no comparison with kafka-python. The decompression floors
produce no records: their output size must only stay the same.

Times are **CPU seconds** of this process (the machine is shared; wall times are in the JSON).
Printed: the median of the per-round ratios. Raw results: ``docs/data/bench-decode.json`` at the
default size, ``bench-decode-<n>mb.json`` at any other (``make bench`` runs 16 MiB).

    .venv/bin/python benchmarks/bench_decode.py --size-mb 256 --baseline-mb 32
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import cramjam
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import Recorder, Result, headline, records_digest, run_rounds, sized_name, table_digest

from rlm.log import Compression, encode_batch, iter_batches, read_arrow

#: the documented default size (recorded as ``bench-decode.json``; other sizes as ``bench-decode-<n>mb.json``)
DEFAULT_SIZE_MB = 256
EVENTS = ("page_view", "click", "add_to_cart", "checkout", "login", "search", "logout")
PAGES = ("/", "/cart", "/search", "/product/{}", "/account", "/help/{}")
WORDS = ("alpha", "beta", "gamma", "delta", "kafka", "tier", "remote", "segment", "offset", "broker",
         "lorem", "ipsum", "dolor", "sit", "amet", "red", "green", "blue", "fast", "slow")


def make_segment(path: Path, size_mb: int, codec: Compression, batch_bytes: int, seed: int = 7,
                 written_records: list[Any] | None = None) -> int:
    """Write ``size_mb`` of distinct, realistic batches to ``path``; returns the number of records.
    ``written_records`` (if given) receives every record written, as ``(offset, key, value, headers)``."""
    rnd = random.Random(seed)
    target = size_mb * 1024 * 1024
    offset = 0
    ts = 1_700_000_000_000
    written = 0
    with open(path, "wb") as f:
        while written < target:
            records: list[Any] = []
            raw = 0
            while raw < batch_bytes:
                user = rnd.randrange(1_000_000)
                key = None if rnd.random() < 0.05 else b"user-%07d" % user
                event = {"event": rnd.choice(EVENTS), "user": user, "ts": ts + offset + len(records),
                         "page": rnd.choice(PAGES).format(rnd.randrange(10_000)),
                         "session": f"{rnd.getrandbits(64):016x}",
                         "text": " ".join(rnd.choice(WORDS) for _ in range(rnd.randrange(0, 90)))}
                value = json.dumps(event, separators=(",", ":")).encode()
                headers = [(h, v) for h, v in (("trace-id", b"%032x" % rnd.getrandbits(128)),
                                                ("content-type", b"application/json"),
                                                ("source", b"svc-%d" % rnd.randrange(8)))
                           if rnd.random() < 0.5]
                records.append((key, value, headers, ts + offset + len(records)))
                raw += len(value) + (len(key) if key else 0) + 20 + sum(len(h) + len(v) for h, v in headers)
            if written_records is not None:
                written_records += [(offset + i, k, v, h) for i, (k, v, h, _) in enumerate(records)]
            batch = encode_batch(records, base_offset=offset, compression=codec)
            f.write(batch)
            written += len(batch)
            offset += len(records)
    return offset


def cpu_timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(CPU seconds of this process, wall seconds, result)."""
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.process_time() - c0, time.perf_counter() - t0, out


def arrow_case(data: Any, size: int) -> Callable[[], Result]:
    def run() -> Result:
        cpu, wall, table = cpu_timed(lambda: read_arrow(data, topic="bench", partition=0, verify_crc=True))
        return Result(cpu, table_digest({0: table}, headers=True), size, table.num_rows, {"wall_s": wall})
    return run


def client_case(memory_records: type, data: bytes) -> Callable[[], Result]:
    def parse() -> tuple[list[tuple[int, bytes | None, bytes | None]], list[Any]]:
        recs: list[tuple[int, bytes | None, bytes | None]] = []
        hdrs: list[Any] = []
        records = memory_records(data)
        while True:
            batch = records.next_batch()
            if batch is None:
                return recs, hdrs
            for rec in batch:
                _ = rec.timestamp
                recs.append((rec.offset, rec.key, rec.value))
                hdrs.append(rec.headers)

    def run() -> Result:
        cpu, wall, (recs, hdrs) = cpu_timed(parse)
        return Result(cpu, records_digest({0: recs}, {0: hdrs}), len(data), len(recs), {"wall_s": wall})
    return run


def alone_case(fn: Callable[[], int], size: int) -> Callable[[], Result]:
    def run() -> Result:
        cpu, wall, out = cpu_timed(fn)
        return Result(cpu, f"{out} bytes out", size, 0, {"wall_s": wall})
    return run


#: reused output of the decompression floors (one batch's worth: Kafka batches are small)
_OUT = bytearray(4 << 20)


def lz4_alone(payloads: list[memoryview]) -> int:
    """Every batch's LZ4 frame decompressed by one library call into one reused buffer."""
    into, out = cramjam.lz4.decompress_into, _OUT
    return sum(int(into(p, out)) for p in payloads)


def gzip_alone(payloads: list[memoryview]) -> int:
    """Every batch's gzip member inflated by one zlib call (faster here than cramjam's)."""
    inflate = zlib.decompress
    return sum(len(inflate(p, 31)) for p in payloads)


def snappy_alone(payloads: list[memoryview]) -> int:
    """Every xerial block of every batch decompressed into one reused buffer (the block walk is
    the least any reader of Kafka's snappy framing must do)."""
    into, out, unpack = cramjam.snappy.decompress_raw_into, _OUT, struct.unpack_from
    total = 0
    for p in payloads:
        pos, end = 16, len(p)
        while pos < end:
            (n,) = unpack(">i", p, pos)
            total += int(into(p[pos + 4 : pos + 4 + n], out))
            pos += 4 + n
    return total


ALONE: dict[Compression, Callable[[list[memoryview]], int]] = {
    Compression.LZ4: lz4_alone, Compression.GZIP: gzip_alone, Compression.SNAPPY: snappy_alone}


def zstd_alone(payloads: list[memoryview], library: str) -> int:
    """Decompress every batch payload, one call per batch, as a decoder must."""
    total = 0
    if library == "zstandard":  # what rlm.log uses without libzstd (one decoder context reused)
        new = zstandard.ZstdDecompressor().decompressobj
        for p in payloads:
            total += len(new().decompress(p))
    else:
        for p in payloads:
            total += len(cramjam.zstd.decompress(p))
    return total


class CompiledAlone:
    """A C decompressor called by address over every payload from a numba loop, into one reused
    buffer: the floor without any Python per batch (what the compiled decoder itself calls)."""

    def __init__(self, data: bytes, payloads: list[tuple[int, int]]) -> None:
        import numpy as np

        self.arr = np.frombuffer(data, np.uint8)
        self.pos = np.array([p for p, _ in payloads], np.int64)
        self.len = np.array([n for _, n in payloads], np.int64)
        self.out = np.empty(4 << 20, np.uint8)
        self.extra: tuple[Any, ...] = ()  # further arguments of the loop
        self.fn, self.context, self.loop = self.library()
        self()  # compile

    def library(self) -> tuple[int, int, Callable[..., int]]:
        """``(function address, context, compiled loop)``; RuntimeError without the library."""
        raise NotImplementedError

    def __call__(self) -> int:
        return int(self.loop(self.fn, self.context, self.arr.ctypes.data, self.pos, self.len,
                             self.out.ctypes.data, len(self.out), *self.extra))


class LibzstdAlone(CompiledAlone):
    """``ZSTD_decompressDCtx`` per payload."""

    def library(self) -> tuple[int, int, Callable[..., int]]:
        from numba import njit

        from rlm.log import _zstd
        from rlm.log._intrinsics import jit_zstd_call

        pool = _zstd.pool()
        if pool is None:
            raise RuntimeError("no libzstd")

        @njit(nogil=True)
        def loop(fn: int, dctx: int, base: int, pos: object, ln: object, dst: int, cap: int) -> int:
            total = 0
            for i in range(pos.shape[0]):  # type: ignore[attr-defined]
                total += jit_zstd_call(fn, dctx, dst, cap, base + pos[i], ln[i])  # type: ignore[index]
            return total

        return pool.lib.decompress_dctx, pool.acquire(), loop


class LibdeflateAlone(CompiledAlone):
    """``libdeflate_gzip_decompress_ex`` per payload (one gzip member each)."""

    def library(self) -> tuple[int, int, Callable[..., int]]:
        import numpy as np
        from numba import njit

        from rlm.log import _libdeflate
        from rlm.log._intrinsics import jit_gzip_call

        pool = _libdeflate.pool()
        if pool is None:
            raise RuntimeError("no libdeflate")
        self.extra = (np.zeros(2, np.int64),)  # the sizes libdeflate reports

        @njit(nogil=True)
        def loop(fn: int, d: int, base: int, pos: object, ln: object, dst: int, cap: int,
                 sizes: object) -> int:
            total = 0
            for i in range(pos.shape[0]):  # type: ignore[attr-defined]
                if jit_gzip_call(fn, d, base + pos[i], ln[i], dst, cap, sizes.ctypes.data) != 0:  # type: ignore
                    return -1
                total += sizes[1]  # type: ignore[index]
            return total

        return pool.lib.gzip_decompress_ex, pool.acquire(), loop


def first_mb(data: bytes, mb: int) -> bytes:
    """Whole batches from the start of ``data`` covering about ``mb`` MiB."""
    end = 0
    for h in iter_batches(data, verify_crc=False):
        if h.end_position > mb * 1024 * 1024:
            break
        end = h.end_position
    return data[:end]


def kafka_python_reads(codec: Compression) -> bool:
    """Whether kafka-python can decode ``codec`` here (it needs the ``lz4``/``python-snappy``
    packages for those two, which this project does not install)."""
    from kafka import codec as kp

    return {Compression.LZ4: kp.has_lz4, Compression.SNAPPY: kp.has_snappy}.get(codec, lambda: True)()


def written_digest(written: list[Any], count: int) -> str:
    """The digest of the first ``count`` records the generator wrote (the reference where
    kafka-python cannot decode the codec)."""
    rows = written[:count]
    return records_digest({0: [(o, k, v) for o, k, v, _ in rows]}, {0: [h for *_, h in rows]})


def expected_digest(data: bytes) -> str:
    """What the generator wrote, decoded by the slowest, plainest reference (kafka-python) once."""
    from kafka.record.memory_records import MemoryRecords

    recs, hdrs = [], []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        for rec in batch:
            recs.append((rec.offset, rec.key, rec.value))
            hdrs.append(rec.headers)
    return records_digest({0: recs}, {0: hdrs})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=DEFAULT_SIZE_MB)
    ap.add_argument("--baseline-mb", type=int, default=32, help="data given to kafka-python (it is slow)")
    ap.add_argument("--batch-bytes", type=int, default=16384,
                    help="uncompressed bytes per batch (batch.size)")
    ap.add_argument("--codecs", default="none,zstd,lz4,snappy,gzip")
    ap.add_argument("--dir", default=None, help="where to write the segments (default: a temp dir)")
    ap.add_argument("--rounds", type=int, default=3, help="counted interleaved rounds (after one warm-up)")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-decode.json")
    args = ap.parse_args()
    # the documented default size and `make bench`'s smaller one are both recorded (issue 42, 5)
    rec = Recorder(sized_name("decode", args.size_mb, DEFAULT_SIZE_MB, "mb"), args)

    from aiokafka.record._crecords import MemoryRecords as AioMemoryRecords
    from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

    # load the kernels before anything is timed
    read_arrow(encode_batch([(b"k", b"v", None, 0)], base_offset=0), topic="warm", partition=0)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for name in args.codecs.split(","):
            codec = Compression[name.upper()]
            path = Path(tmp) / f"{name}-00000000000000000000.log"
            t0 = time.perf_counter()
            kp_reads = kafka_python_reads(codec)
            written: list[Any] | None = None if kp_reads else []
            records = make_segment(path, args.size_mb, codec, args.batch_bytes, written_records=written)
            data = path.read_bytes()
            size = len(data)
            print(f"\n{name}: {size / 1e6:.0f} MB, {records} records, {args.batch_bytes} B batches "
                  f"(generated in {time.perf_counter() - t0:.1f} s)", flush=True)
            sample = first_mb(data, args.baseline_mb)
            if kp_reads:
                want_sample = expected_digest(sample)
                rows = run_rounds({"rlm.log.read_arrow": arrow_case(sample, len(sample)),
                                   "kafka-python": client_case(KpMemoryRecords, sample)},
                                  args.rounds, label=f"{name} first {len(sample) >> 20} MiB",
                                  expect=want_sample)
                rec.section(f"{name} kafka-python sample", rows)
                rec.add(headline(rows, f"decode {name}, vs kafka-python", "rlm.log.read_arrow",
                                 "kafka-python", 10.0))
            else:
                print(f"  kafka-python cannot decode {name} here: no comparison with it; the reference "
                      "is the records the generator wrote", flush=True)
            # every case decodes the same bytes in memory (the floors and aiokafka cannot read a
            # file); the decode of the file itself, which also reads it, is a case of its own
            cases: dict[str, Callable[[], Result]] = {
                "rlm.log.read_arrow": arrow_case(data, size),
                "rlm.log.read_arrow (file)": arrow_case(path, size),
                "aiokafka _crecords": client_case(AioMemoryRecords, data)}
            own = []
            view = memoryview(data)
            headers = list(iter_batches(data, verify_crc=False))
            payloads = [view[h.position + 61: h.end_position] for h in headers]
            if codec in ALONE:
                floor = f"{name} alone"
                cases[floor] = alone_case(partial(ALONE[codec], payloads), size)
                own.append(floor)
            if codec == Compression.ZSTD:
                cases["zstd alone (zstandard)"] = alone_case(partial(zstd_alone, payloads, "zstandard"), size)
                own.append("zstd alone (zstandard)")
            compiled = {Compression.ZSTD: ("zstd alone (libzstd)", LibzstdAlone),
                        Compression.GZIP: ("gzip alone (libdeflate)", LibdeflateAlone)}.get(codec)
            if compiled is not None:
                with contextlib.suppress(RuntimeError):  # no such library here
                    lib = compiled[1](data, [(h.position + 61, h.end_position - h.position - 61)
                                             for h in headers])
                    cases[compiled[0]] = alone_case(lib, size)
                    own.append(compiled[0])
            t0 = time.perf_counter()
            # the whole file through the reference decoder, once (or what was written)
            want = expected_digest(data) if written is None else written_digest(written, records)
            took = time.perf_counter() - t0
            print(f"  reference digest ({'kafka-python' if kp_reads else 'as written'}, whole file): {want} "
                  f"in {took:.1f} s", flush=True)
            del written
            rows = run_rounds(cases, args.rounds, label=name, expect=want, own=own)
            rec.section(name, rows)
            rec.facts[name] = {"bytes": size, "records": records, "sample_bytes": len(sample)}
            rec.add(headline(rows, f"decode {name}, vs aiokafka", "rlm.log.read_arrow", "aiokafka _crecords",
                             1.0))
            rec.add(headline(rows, f"decode {name} from its file, vs from the same bytes in memory",
                             "rlm.log.read_arrow (file)", "rlm.log.read_arrow", None))
            floor = "zstd alone (zstandard)" if codec == Compression.ZSTD else f"{name} alone"
            if floor in cases:
                label = f"decode {name}, vs decompression alone" + (" (zstandard)" if name == "zstd" else "")
                rec.add(headline(rows, label, "rlm.log.read_arrow",
                                 floor, 1 / 1.5, "within 1.5x (>= 0.67x)"))
            if codec == Compression.GZIP and compiled is not None and compiled[0] in cases:
                # the decoder inflates with libdeflate: its floor is libdeflate's too, not only zlib's
                rec.add(headline(rows, "decode gzip, vs decompression alone (libdeflate)",
                                 "rlm.log.read_arrow", compiled[0], 1 / 1.5, "within 1.5x (>= 0.67x)"))
            del data, sample, cases, view, payloads
            os.unlink(path)
    rec.save(not args.no_save)


if __name__ == "__main__":
    main()
