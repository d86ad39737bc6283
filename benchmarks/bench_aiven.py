"""What Aiven's transforms cost the read side: scan to Arrow of zstd + AES-GCM objects vs plain
objects of the *same* segments (not a test).

Writes ``--size-mb`` of records (JSON-like values, uncompressed batches, so zstd has work) with
``rlm.log.writer``, tiers them with ``rlm run --once`` (local plugin, file metadata store), then
lays the tiered segments out twice in Aiven's object layout, with ``--chunk-mb`` chunks:

* ``plain``: ``.log`` verbatim, ``fixed`` chunk index (what Aiven's plugin writes with no transform);
* ``zstd+aes``: every chunk zstd-compressed then AES-256-GCM encrypted under a per-segment key
  wrapped with RSA-OAEP (SHA3-512), ``variable`` chunk index, encrypted indexes.

(The layout is written here, for the benchmark only, so both runs read the very same records; the
product is tested against objects written by Aiven's own plugin, ``tests/fixtures/aiven``.)
Then, after one uncounted warm-up scan of each, ``--rounds`` interleaved rounds each scan the
whole partition to Arrow through ``RemoteFetcher.scan`` from both layouts, each with a fresh
fetcher (empty chunk cache), and check the two answers equal by SHA-256 of the Arrow IPC bytes.
Reported: the median of the per-round time ratios (zstd+aes / plain) and each layout's median
MB/s of segment bytes.

    .venv/bin/python benchmarks/bench_aiven.py --size-mb 128 --rounds 7
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MB = 1 << 20
TOPIC = "bench-aiven"
_INDEXES = (("offset", "OFFSET"), ("timestamp", "TIMESTAMP"), ("producerSnapshot", "PRODUCER_SNAPSHOT"),
            ("leaderEpoch", "LEADER_EPOCH"), ("transaction", "TRANSACTION"))


def write_partition(logs: Path, size: int, segment_bytes: int) -> None:
    from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
    from rlm.types import KafkaUuid, TopicPartition

    rnd = random.Random(7)
    words = ["order", "customer", "amount", "status", "shipped", "pending", "eur", "usd", "sku", "qty"]
    w = PartitionWriter(logs / f"{TOPIC}-0", topic_id=KafkaUuid.random(),
                        config=WriterConfig(segment_bytes=segment_bytes))
    written = 0
    while written < size:
        recs = []
        for _ in range(50):
            value = json.dumps([{"i": rnd.randrange(10**6), "w": rnd.choice(words), "n": rnd.random()}
                                for _ in range(rnd.randrange(3, 15))]).encode()
            recs.append((f"k{rnd.randrange(10**5)}".encode(), value))
            written += len(value) + 8
        w.append(recs)
    w.roll()
    end = w.next_offset
    w.close()
    write_log_dir_files(logs, [(TopicPartition(TOPIC, 0), end)])


def tier(logs: Path, work: Path) -> None:
    from rlm.config import load_config
    from rlm.daemon.service import Daemon

    cfg = load_config(None, log_dirs=[str(logs)], work_dir=str(work), http={"enabled": False},
                      node_id=0, topic_defaults={"remote.storage.enable": True, "retention.ms": -1})
    d = Daemon(cfg, once=True).start()
    try:
        assert d.run_once() == 0
    finally:
        d.stop()


def _sizes_codec(sizes: list[int]) -> bytes:
    """Aiven's ChunkSizesBinaryCodec (see rsm_plugins.aiven_manifest.decode_chunk_sizes)."""
    out = len(sizes).to_bytes(4, "big")
    if len(sizes) <= 1:
        return out + b"".join(s.to_bytes(4, "big") for s in sizes)
    base = min(sizes[:-1])
    width = max(1, (max(s - base for s in sizes[:-1]).bit_length() + 7) // 8)
    return (out + base.to_bytes(4, "big") + bytes([width])
            + b"".join((s - base).to_bytes(width, "big") for s in sizes[:-1]) + sizes[-1].to_bytes(4, "big"))


class Layouts:
    """Writes one segment in both layouts (benchmark-only encoder)."""

    def __init__(self, out: Path, chunk: int) -> None:
        from Crypto.PublicKey import RSA

        self.out, self.chunk = out, chunk
        key = RSA.generate(2048)
        (out / "keys").mkdir(parents=True)
        (out / "keys" / "private.pem").write_bytes(key.export_key(pkcs=8))
        self.public = key.publickey()

    def write(self, md: Any, log: bytes, indexes: dict[str, bytes | None]) -> None:
        import zstandard
        from Crypto.Cipher import AES, PKCS1_OAEP
        from Crypto.Hash import SHA3_512
        from Crypto.Signature.pss import MGF1

        from rsm_plugins.aiven_keys import main_path

        c = self.chunk
        chunks = [log[i:i + c] for i in range(0, len(log), c)] or [b""]
        dek, aad = os.urandom(32), os.urandom(32)

        def seal(data: bytes) -> bytes:
            nonce = os.urandom(12)
            cipher = AES.new(dek, AES.MODE_GCM, nonce=nonce)
            cipher.update(aad)
            ct, tag = cipher.encrypt_and_digest(data)
            return nonce + ct + tag

        zc = zstandard.ZstdCompressor(write_content_size=True)
        sealed = [seal(zc.compress(ch)) for ch in chunks]
        wrapped = PKCS1_OAEP.new(self.public, hashAlgo=SHA3_512,
                                 mgfunc=lambda x, y: MGF1(x, y, SHA3_512)).encrypt(dek)
        for name, transformed in (("plain", False), ("zstd-aes", True)):
            base = self.out / name / main_path(md)
            base.parent.mkdir(parents=True, exist_ok=True)
            seg_idx: dict[str, Any] = {}
            blob = b""
            for field, _ in _INDEXES:
                data = indexes[field]
                if data is None:
                    seg_idx[field] = None
                    continue
                stored = seal(data) if transformed and data else data
                seg_idx[field] = {"position": len(blob), "size": len(stored)}
                blob += stored
            base.with_suffix(".indexes").write_bytes(blob)
            doc: dict[str, Any] = {"version": "1", "segmentIndexes": seg_idx, "compression": transformed}
            if transformed:
                base.with_suffix(".log").write_bytes(b"".join(sealed))
                frame = zc.compress(_sizes_codec([len(s) for s in sealed]))
                doc["chunkIndex"] = {"type": "variable", "originalChunkSize": c, "originalFileSize": len(log),
                                     "transformedChunks": base64.b64encode(frame).decode()}
                doc["encryption"] = {"dataKey": "k1:" + base64.b64encode(wrapped).decode(),
                                     "aad": base64.b64encode(aad).decode()}
            else:
                base.with_suffix(".log").write_bytes(log)
                doc["chunkIndex"] = {"type": "fixed", "originalChunkSize": c, "originalFileSize": len(log),
                                     "transformedChunkSize": c, "finalTransformedChunkSize": len(chunks[-1])}
            base.with_suffix(".rsm-manifest").write_text(json.dumps(doc))


def build_layouts(work: Path, out: Path, chunk: int) -> tuple[Path, int]:
    """Both layouts of every tiered segment; a metadata store without our custom metadata."""
    import dataclasses

    import rsm_plugins
    from rlm.types import IndexType, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
    from rlmm.file import FileRemoteLogMetadataManager

    src = FileRemoteLogMetadataManager.open(work / "metadata")
    local = rsm_plugins.load("local", {"root": str(work / "remote")})
    dst = FileRemoteLogMetadataManager()
    dst.configure({"dir": str(out / "metadata")})
    layouts = Layouts(out, chunk)
    total = 0
    try:
        tps = list(src.known_partitions())
        src.on_partition_leadership_changes(set(tps), set())
        for tp in tps:
            for md in src.list_remote_log_segments(tp):
                if md.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                    continue
                with local.fetch_log_segment(md, 0) as f:
                    log = f.read()
                idx: dict[str, bytes | None] = {}
                for field, name in _INDEXES:
                    try:
                        with local.fetch_index(md, IndexType[name]) as f:
                            idx[field] = f.read()
                    except rsm_plugins.api.RemoteResourceNotFoundError:
                        idx[field] = None
                layouts.write(md, log, idx)
                clean = dataclasses.replace(md, custom_metadata=None,
                                            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
                dst.add_remote_log_segment_metadata(clean)
                dst.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, md.event_timestamp_ms,
                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED, md.broker_id))
                total += len(log)
    finally:
        src.close()
        dst.close()
        local.close()
    return out / "metadata", total


def scan_once(out: Path, name: str, metadata: Path, round_no: int) -> tuple[float, str, int]:
    from fetcher import RemoteFetcher
    from rlm.config import load_config

    storage: dict[str, Any] = {"backend": "local", "backend.root": str(out / name)}
    if name != "plain":
        storage["encryption.enabled"] = True
        storage["encryption.key.pairs.k1.private.key.file"] = str(out / "keys" / "private.pem")
    work = out / f"work-{name}-{round_no}"
    cfg = load_config(None, work_dir=str(work), storage={"plugin": "aiven", "config": storage},
                      metadata={"manager": "file", "config": {"dir": str(metadata), "read.only": True}})
    digest = hashlib.sha256()
    rows = 0
    import pyarrow as pa

    with RemoteFetcher.from_config(cfg) as f:
        t0 = time.perf_counter()
        for batch in f.scan(TOPIC, 0):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as w:
                w.write_batch(batch)
            digest.update(sink.getvalue().to_pybytes())
            rows += batch.num_rows
        elapsed = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    return elapsed, digest.hexdigest(), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=128)
    ap.add_argument("--segment-mb", type=int, default=16)
    ap.add_argument("--chunk-mb", type=float, default=4, help="Aiven's chunk.size (recommended 4 MiB)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dir", type=Path, help="keep the data here (default: a temp dir, removed)")
    a = ap.parse_args()
    from rlm.logging_setup import configure_logging

    configure_logging("console", "warning")
    tmp = a.dir or Path(tempfile.mkdtemp(prefix="bench-aiven-"))
    try:
        t0 = time.perf_counter()
        write_partition(tmp / "logs", a.size_mb * MB, a.segment_mb * MB)
        tier(tmp / "logs", tmp / "tier")
        metadata, total = build_layouts(tmp / "tier", tmp / "aiven", int(a.chunk_mb * MB))
        print(f"setup: {total / MB:.1f} MB of segments in {time.perf_counter() - t0:.1f} s; "
              f"chunk {a.chunk_mb} MiB; {a.rounds} interleaved rounds", flush=True)
        for name in ("plain", "zstd-aes"):  # warm-up, not counted: imports, JIT, page cache
            scan_once(tmp / "aiven", name, metadata, -1)
        ratios, plain_s, aes_s = [], [], []
        for r in range(a.rounds):
            order = ["plain", "zstd-aes"] if r % 2 == 0 else ["zstd-aes", "plain"]
            got = {name: scan_once(tmp / "aiven", name, metadata, r) for name in order}
            (tp, dp, rp), (ta, da, ra) = got["plain"], got["zstd-aes"]
            if dp != da or rp != ra:
                raise SystemExit(f"round {r}: answers differ (rows {rp} vs {ra})")
            ratios.append(ta / tp)
            plain_s.append(tp)
            aes_s.append(ta)
            print(f"round {r}: plain {tp:.3f} s, zstd+aes {ta:.3f} s, ratio {ta / tp:.2f} "
                  f"({rp} rows, digest {dp[:12]})", flush=True)
        print(f"median ratio zstd+aes/plain: {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f}); "
              f"plain {total / MB / statistics.median(plain_s):.0f} MB/s, "
              f"zstd+aes {total / MB / statistics.median(aes_s):.0f} MB/s of segment bytes")
    finally:
        if a.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
