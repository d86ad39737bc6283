"""Decode benchmark: rlm.log.read_arrow vs kafka-python vs aiokafka's compiled parser (not a test).

Generates a partition segment of ``--size-mb`` (default 1024) of 100-byte values with 10-byte
keys, once uncompressed and once zstd, with :func:`rlm.log.encode_batch`, then decodes it in
the same run with:

* ``rlm.log.read_arrow`` (to a ``pyarrow.Table``; CRC-32C verified, and once without);
* kafka-python's ``kafka.record.MemoryRecords`` (pure Python; on the first ``--baseline-mb``);
* aiokafka's Cython ``aiokafka.record._crecords.MemoryRecords``;
* for zstd, zstd decompression of every batch payload alone, one call per batch: with
  ``zstandard`` (one reused decoder context), with ``cramjam``, and with libzstd's one-shot
  ``ZSTD_decompressDCtx`` called from a compiled loop into one reused buffer (what
  ``rlm.log`` does inside its decoder: the cheapest way to decompress the batches at all).

The two client parsers build one Python object per record and touch offset, timestamp, key,
value and headers; they do not verify CRCs. Rates are records/s and MB/s of ``.log`` bytes.

For zstd the script then measures ``read_arrow`` (CRC checked) and decompression alone
*interleaved*, round after round (``--ratio-rounds``), and prints the ratio of their best CPU
times: on a shared machine the load changes from one minute to the next, and interleaving
exposes both to the same conditions.

    .venv/bin/python benchmarks/bench_decode.py --size-mb 256
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import struct
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import cramjam
import zstandard

from rlm.log import Compression, encode_batch, iter_batches, read_arrow

POOL = 64  # distinct batches; repeated with patched base offsets (outside the CRC) to fill the file


def make_segment(path: Path, size_mb: int, codec: Compression, batch_bytes: int, seed: int = 7) -> int:
    """Write ``size_mb`` of batches to ``path``; returns the number of records."""
    rnd = random.Random(seed)
    words = [
        bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rnd.randint(3, 9)))
        for _ in range(2000)
    ]
    per_batch = max(1, batch_bytes // 125)
    pool = []
    ts = 1_700_000_000_000
    for b in range(POOL):
        records = []
        for i in range(per_batch):
            value = b" ".join(rnd.choice(words) for _ in range(20))[:100].ljust(100, b".")
            records.append((b"key%07d" % (b * per_batch + i), value, None, ts + b * per_batch + i))
        pool.append(encode_batch(records, base_offset=0, compression=codec))
    target = size_mb * 1024 * 1024
    written = 0
    offset = 0
    with open(path, "wb") as f:
        i = 0
        while written < target:
            batch = bytearray(pool[i % POOL])
            struct.pack_into(">q", batch, 0, offset)
            f.write(batch)
            written += len(batch)
            offset += per_batch
            i += 1
    return offset


def timed(fn: Callable[[], int]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, result). CPU time is what we compare: the
    benchmark machine may be shared, which inflates wall time but not CPU time."""
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    n = fn()
    return time.perf_counter() - t0, time.process_time() - c0, n


def best(fn: Callable[[], int], repeat: int) -> tuple[float, float, int]:
    runs = [timed(fn) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[0][2]


def rlm_arrow(path: Path, verify_crc: bool) -> int:
    table = read_arrow(path, topic="bench", partition=0, verify_crc=verify_crc)
    return int(table.num_rows)


def client_parser(memory_records: type, data: bytes) -> int:
    n = 0
    records = memory_records(data)
    while True:
        batch = records.next_batch()
        if batch is None:
            return n
        for rec in batch:
            _ = (rec.offset, rec.timestamp, rec.key, rec.value, rec.headers)
            n += 1


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


class LibzstdAlone:
    """``ZSTD_decompressDCtx`` over every payload from a numba loop, into one reused buffer."""

    def __init__(self, data: bytes, payloads: list[tuple[int, int]]) -> None:
        import numpy as np
        from numba import njit

        from rlm.log import _zstd
        from rlm.log._intrinsics import jit_zstd_call

        pool = _zstd.pool()
        if pool is None:
            raise RuntimeError("no libzstd")
        self.lib = pool.lib
        self.dctx = pool.acquire()
        self.arr = np.frombuffer(data, np.uint8)
        self.pos = np.array([p for p, _ in payloads], np.int64)
        self.len = np.array([n for _, n in payloads], np.int64)
        self.out = np.empty(4 << 20, np.uint8)

        @njit(nogil=True)
        def loop(fn: int, dctx: int, base: int, pos: object, ln: object, dst: int, cap: int) -> int:
            total = 0
            for i in range(pos.shape[0]):  # type: ignore[attr-defined]
                total += jit_zstd_call(fn, dctx, dst, cap, base + pos[i], ln[i])  # type: ignore[index]
            return total

        self.loop = loop
        self()  # compile

    def __call__(self) -> int:
        return int(
            self.loop(
                self.lib.decompress_dctx,
                self.dctx,
                self.arr.ctypes.data,
                self.pos,
                self.len,
                self.out.ctypes.data,
                len(self.out),
            )
        )


def first_mb(path: Path, mb: int) -> bytes:
    """Whole batches from the start of ``path`` covering about ``mb`` MiB."""
    data = path.read_bytes()
    end = 0
    for h in iter_batches(data, verify_crc=False):
        if h.end_position > mb * 1024 * 1024:
            break
        end = h.end_position
    return data[:end]


def report(label: str, timing: tuple[float, float, int], nbytes: int) -> None:
    wall, cpu, records = timing
    print(
        f"  {label:<42} {records / cpu / 1e6:7.2f} M rec/s {nbytes / cpu / 1e6:8.1f} MB/s"
        f"  cpu {cpu:7.3f} s  wall {wall:7.3f} s  ({records} records)",
        flush=True,
    )


def ratio_rounds(path: Path, alone: dict[str, Callable[[], int]], rounds: int) -> None:
    """read_arrow (CRC checked) against each decompression-alone baseline, interleaved."""
    if rounds <= 0:
        return
    arrow: list[float] = []
    base: dict[str, list[float]] = {lib: [] for lib in alone}
    for _ in range(rounds):
        arrow.append(timed(partial(rlm_arrow, path, True))[1])
        for lib, fn in alone.items():
            base[lib].append(timed(fn)[1])
    print(f"  interleaved, best of {rounds} rounds: read_arrow (CRC checked) cpu {min(arrow):.3f} s")
    for lib, times in base.items():
        print(
            f"    vs decompression alone ({lib}) cpu {min(times):.3f} s: {min(arrow) / min(times):.2f}x",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--baseline-mb", type=int, default=64, help="data given to kafka-python (it is slow)")
    ap.add_argument(
        "--batch-bytes", type=int, default=16384, help="uncompressed bytes per batch (producer batch.size)"
    )
    ap.add_argument("--codecs", default="none,zstd")
    ap.add_argument("--dir", default=None, help="where to write the segments (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N for the fast decoders")
    ap.add_argument(
        "--ratio-rounds", type=int, default=5, help="zstd: interleaved rounds of read_arrow vs decompression"
    )
    args = ap.parse_args()

    from aiokafka.record._crecords import MemoryRecords as AioMemoryRecords
    from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

    read_arrow(
        encode_batch([(b"k", b"v", None, 0)], base_offset=0), topic="warm", partition=0
    )  # load kernels
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for name in args.codecs.split(","):
            codec = Compression[name.upper()]
            path = Path(tmp) / f"{name}-00000000000000000000.log"
            t0 = time.perf_counter()
            records = make_segment(path, args.size_mb, codec, args.batch_bytes)
            size = path.stat().st_size
            print(
                f"\n{name}: {size / 1e6:.0f} MB, {records} records, {args.batch_bytes} B batches "
                f"(generated in {time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
            report(
                "rlm.log.read_arrow (CRC checked)", best(partial(rlm_arrow, path, True), args.repeat), size
            )
            report(
                "rlm.log.read_arrow (no CRC check)", best(partial(rlm_arrow, path, False), args.repeat), size
            )
            data = path.read_bytes()
            report(
                "aiokafka _crecords (no CRC check)",
                best(partial(client_parser, AioMemoryRecords, data), args.repeat),
                size,
            )
            del data
            sample = first_mb(path, args.baseline_mb)
            report(
                f"kafka-python, first {len(sample) / 1e6:.0f} MB (no CRC)",
                timed(partial(client_parser, KpMemoryRecords, sample)),
                len(sample),
            )
            del sample
            if codec == Compression.ZSTD:
                data = path.read_bytes()
                view = memoryview(data)
                headers = list(iter_batches(data, verify_crc=False))
                payloads = [view[h.position + 61 : h.end_position] for h in headers]
                alone: dict[str, Callable[[], int]] = {
                    lib: partial(zstd_alone, payloads, lib) for lib in ("zstandard", "cramjam")
                }
                with contextlib.suppress(RuntimeError):  # no libzstd found
                    alone["libzstd one-shot"] = LibzstdAlone(
                        data, [(h.position + 61, h.end_position - h.position - 61) for h in headers]
                    )
                for lib, fn in alone.items():
                    wall, cpu, out = best(fn, args.repeat)
                    print(
                        f"  zstd decompression alone ({lib}):{'':<{max(1, 22 - len(lib))}} cpu {cpu:7.3f} s"
                        f"  wall {wall:7.3f} s  ({out / 1e6:.0f} MB out)",
                        flush=True,
                    )
                ratio_rounds(path, alone, args.ratio_rounds)
                del payloads, view, data, headers, alone
            os.unlink(path)


if __name__ == "__main__":
    main()
