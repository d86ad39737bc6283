"""A cleaned segment that merges tiered offsets with untiered ones, on files written as the
broker's cleaner leaves them (whole batches removed, survivors at their offsets, one segment for
a group of three), beside the standalone daemon:

* the next copy starts at the remote end and holds exactly the merged segment's batches from
  there on, with indexes (never the whole segment again: a tiered range is never copied twice);
* the tiered objects do not change, and a fetch into a gap of the copied tail is served from the
  next offset;
* ``rlm verify --deep`` accepts the cleaned local segment against the uncompacted remote copy,
  and reports a local record the remote copy does not hold as ``local_segment_mismatch``;
* a batch spanning the remote end is refused with a typed error.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fetcher import RemoteFetcher
from rlm.config import load_config
from rlm.daemon.compacted import StraddlingBatchError, write_tail_segment
from rlm.daemon.local_log import LocalLogView
from rlm.daemon.service import Daemon
from rlm.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, MetaProperties
from rlm.log.model import Record
from rlm.log.offset_index import parse_offset_index
from rlm.log.records import iter_batches, iter_records, read_batch_bytes
from rlm.log.writer import PartitionWriter, WriterConfig, merge_offset_checkpoint, write_log_dir_files
from rlm.types import IndexType, KafkaUuid, TopicPartition
from tests.compacted.swapping_rsm import swap_in

pytestmark = pytest.mark.usefixtures("no_remote_compaction")
ROOT = Path(__file__).resolve().parents[2]
TOPIC = "cdc-users"
BATCH = 10  # records per batch; batch i holds offsets 10i..10i+9


def _kept(i: int) -> bool:
    """Which of the original batches the simulated cleaner keeps."""
    return i % 3 != 1


def _original(log_dir: Path, tid: KafkaUuid, batches: int = 31) -> Path:
    """Batches 0-30, segments rolled every 100 offsets (the last one, at 300, is the active one)."""
    pdir = log_dir / f"{TOPIC}-0"
    w = PartitionWriter(pdir, topic_id=tid, config=WriterConfig())
    for i in range(batches):
        if i and i % 10 == 0:
            w.roll()
        w.append([(f"user-{(i * BATCH + j) % 37}".encode(), f"v{i}-{j}".encode() * 20) for j in range(BATCH)],
                 producer_id=5, producer_epoch=0)
    w.close()
    write_log_dir_files(log_dir, [(TopicPartition(TOPIC, 0), w.log_end_offset)],
                        meta=MetaProperties(1, "compacted-tail-0001", 1))
    return pdir


def _batches(pdir: Path) -> list[bytes]:
    out = []
    for log in sorted(pdir.glob("*.log")):
        out += [read_batch_bytes(log, h) for h in iter_batches(log)]
    return out


def _clean(pdir: Path, tid: KafkaUuid, tmp: Path, tamper: bool = False) -> list[bytes]:
    """Rewrites ``pdir`` as the cleaner would: one segment for [0, 300) holding the kept batches
    (with ``tamper``, one of them with other values), the active segment at 300 unchanged."""
    out, kept = _cleaned_files(pdir, tid, tmp, tamper)
    swap_in(out, pdir)
    merge_offset_checkpoint(pdir.parent / CLEANER_OFFSET_CHECKPOINT, {TopicPartition(TOPIC, 0): 300})
    return kept


def _cleaned_files(pdir: Path, tid: KafkaUuid, tmp: Path, tamper: bool = False) -> tuple[Path, list[bytes]]:
    """The files :func:`_clean` puts in place, written in a directory of their own."""
    batches = _batches(pdir)
    out = tmp / "cleaned" / pdir.name
    w = PartitionWriter(out, topic_id=tid)
    kept = []
    for i, b in enumerate(batches[:30]):
        if _kept(i):
            if tamper and i == 3:
                other = tmp / "other" / pdir.name
                t = PartitionWriter(other, topic_id=tid, start_offset=i * BATCH)
                t.append([(b"user-x", b"never written") for _ in range(BATCH)])
                t.close()
                b = _batches(other)[0]
            w.append_at_own_offsets(b)
            kept.append(b)
    w.roll()
    w.append_at_own_offsets(batches[30])
    w.close(clean=False)
    return out, kept


def _config(tmp: Path, plugin: str = "local") -> dict[str, Any]:
    return {
        "log_dirs": [str(tmp / "logs")],
        "work_dir": str(tmp / "work"),
        "storage": {"plugin": plugin, "config": {"root": str(tmp / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(tmp / "work" / "metadata")}},
        "topics": [{"pattern": TOPIC, "remote.storage.enable": True, "cleanup.policy": "compact,delete",
                    "retention.ms": -1}],
        "http": {"enabled": False},
    }


def _tier(cfg: Path) -> None:
    d = Daemon(load_config(cfg), once=True).start()
    try:
        assert d.run_once() == 0
    finally:
        d.stop()


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _verify(cfg: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "rlm.cli", "verify", "--config", str(cfg), "--deep", "--json"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 1), res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@pytest.fixture
def tiered(tmp_path: Path) -> tuple[Path, Path, KafkaUuid]:
    tid = KafkaUuid.random()
    pdir = _original(tmp_path / "logs", tid)
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(_config(tmp_path)))
    _tier(cfg)
    return pdir, cfg, tid


def test_cleaned_segment_already_tiered_is_not_copied_again(
    tiered: tuple[Path, Path, KafkaUuid], tmp_path: Path
) -> None:
    pdir, cfg, tid = tiered
    before = _digest(tmp_path / "remote")
    with RemoteFetcher.from_config(load_config(cfg)) as f:
        assert [s.metadata.start_offset for s in f.plan(TOPIC, 0).segments] == [0, 100, 200]
    _clean(pdir, tid, tmp_path)
    _tier(cfg)  # the merged segment [0, 300) is all tiered already: nothing is copied again
    assert _digest(tmp_path / "remote") == before
    with RemoteFetcher.from_config(load_config(cfg)) as f:
        plan = f.plan(TOPIC, 0)
        assert [(s.metadata.start_offset, s.metadata.end_offset) for s in plan.segments] == [
            (0, 99), (100, 199), (200, 299)]
        # the tiered copy of [200, 300) was the original segment, so offsets 210..219 exist remotely
        got = f.fetch(TOPIC, 0, 215)
        assert next(r.offset for _, r in iter_records(got.records) if r.offset >= 215) == 215
    assert not _verify(cfg)["problems"], "a cleaned local segment is not corruption"


def test_straddling_segment_copies_only_its_tail(tmp_path: Path) -> None:
    tid = KafkaUuid.random()
    logs = tmp_path / "logs"
    pdir = _original(logs, tid)
    # tier [0, 200) only: the segment at 200 is the active one at the time
    for f in pdir.glob("00000000000000000300.*"):
        f.rename(tmp_path / f.name)
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(_config(tmp_path)))
    _tier(cfg)
    for f in tmp_path.glob("00000000000000000300.*"):
        f.rename(pdir / f.name)
    before = _digest(tmp_path / "remote")
    kept = _clean(pdir, tid, tmp_path)  # one segment [0, 300): straddles the remote end 199
    _tier(cfg)
    after = _digest(tmp_path / "remote")
    assert {k: after[k] for k in before} == before, "tiered objects unchanged"
    with RemoteFetcher.from_config(load_config(cfg)) as f:
        plan = f.plan(TOPIC, 0)
        spans = [(s.metadata.start_offset, s.metadata.end_offset) for s in plan.segments]
        assert spans == [(0, 99), (100, 199), (200, 299)], "the tail from the remote end, nothing twice"
        tail = plan.segments[-1].metadata
        want = b"".join(b for b in kept if int.from_bytes(b[:8], "big") >= 200)
        with f.rsm.fetch_log_segment(tail, 0) as s:
            assert s.read() == want, "the merged segment's batches from the remote end, unchanged"
        with f.rsm.fetch_index(tail, IndexType.OFFSET) as s:
            parse_offset_index(s.read(), 200)  # a valid offset index of the new segment
        # batch 22 (offsets 220..229) was removed by the cleaner: a fetch there gets offset 230
        got = f.fetch(TOPIC, 0, 225)
        offsets = [r.offset for _, r in iter_records(got.records) if isinstance(r, Record)]
        assert next(o for o in offsets if o >= 225) == 230
    assert not _verify(cfg)["problems"]
    # the metadata store rebuilt from the bucket alone holds the tail segment as it was copied
    raw = _config(tmp_path)
    raw["metadata"] = {"manager": "file", "config": {"dir": str(tmp_path / "rebuilt")}}
    rebuilt = tmp_path / "rebuilt.yaml"
    rebuilt.write_text(yaml.safe_dump(raw))
    res = subprocess.run([sys.executable, "-m", "rlm.cli", "metadata", "rebuild", "--config", str(rebuilt),
                          "--execute"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    with RemoteFetcher.from_config(load_config(rebuilt)) as f:
        again = [(s.metadata.start_offset, s.metadata.end_offset) for s in f.plan(TOPIC, 0).segments]
    assert again == spans


def test_segment_swapped_in_during_its_copy_is_not_published(tmp_path: Path) -> None:
    """The cleaner swaps a merged segment in while the old one is being uploaded: the copy is undone
    (the uploaded bytes are not the segment its metadata names), and the next pass copies the
    merged segment as it now is."""
    tid = KafkaUuid.random()
    pdir = _original(tmp_path / "logs", tid)
    cleaned, _ = _cleaned_files(pdir, tid, tmp_path)
    merge_offset_checkpoint(pdir.parent / CLEANER_OFFSET_CHECKPOINT, {TopicPartition(TOPIC, 0): 300})
    (tmp_path / "remote").mkdir()
    arm = {"pdir": str(pdir), "cleaned": str(cleaned)}
    (tmp_path / "remote" / ".swap-on-copy").write_text(json.dumps(arm))
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(_config(tmp_path, "tests.compacted.swapping_rsm:SwappingLocalRSM")))
    d = Daemon(load_config(cfg), once=True).start()
    try:
        d.run_once()  # the first copy is undone: SegmentRewrittenError, retried
    finally:
        d.stop()
    assert not (tmp_path / "remote" / ".swap-on-copy").exists(), "the swap happened during a copy"
    _tier(cfg)
    with RemoteFetcher.from_config(load_config(cfg)) as f:
        segs = f.plan(TOPIC, 0).segments
        assert [(s.metadata.start_offset, s.metadata.end_offset) for s in segs] == [(0, 299)]
        with f.rsm.fetch_log_segment(segs[0].metadata, 0) as s:
            assert s.read() == (pdir / f"{0:020d}.log").read_bytes()
    assert _verify(cfg)["problems"] == 0


def _gaps(d: Daemon) -> float:
    samples = (s for m in d.metrics.gap_segments.collect() for s in m.samples)
    return sum(s.value for s in samples if s.name.endswith("_total"))


def test_no_false_gap_while_the_cleaner_swaps_segments_in(tmp_path: Path) -> None:
    """Between deleting the segments it replaces and renaming the new ones from ``.swap``, the
    cleaner leaves a directory that seems to start above the remote end: no gap is reported, nothing
    is decided; once the swap is done the merged segment is copied from the remote end on."""
    tid = KafkaUuid.random()
    pdir = _original(tmp_path / "logs", tid)
    held = tmp_path / "held"
    held.mkdir()
    for f in [*pdir.glob("00000000000000000200.*"), *pdir.glob("00000000000000000300.*")]:
        f.rename(held / f.name)  # the broker had written [0, 100) and the active segment 100
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(_config(tmp_path)))
    _tier(cfg)
    for f in held.iterdir():
        f.rename(pdir / f.name)
    cleaned, _ = _cleaned_files(pdir, tid, tmp_path)
    old = [f for f in pdir.iterdir() if f.suffix in (".log", ".index", ".timeindex", ".txnindex")
           and int(f.name.split(".")[0]) < 300]
    for f in old:
        f.rename(pdir / f"{f.name}.deleted")
    for f in cleaned.iterdir():
        if f.name.startswith(f"{0:020d}."):
            shutil.copy(f, pdir / f"{f.name}.swap")
    merge_offset_checkpoint(pdir.parent / CLEANER_OFFSET_CHECKPOINT, {TopicPartition(TOPIC, 0): 300})
    d = Daemon(load_config(cfg), once=True).start()
    try:
        assert d.run_once() == 0
        assert _gaps(d) == 0, "mid-swap, the directory's first segment only seems gone"
    finally:
        d.stop()
    for f in pdir.glob("*.swap"):
        f.rename(pdir / f.name.removesuffix(".swap"))
    for f in pdir.glob("*.deleted"):
        f.unlink()
    d = Daemon(load_config(cfg), once=True).start()
    try:
        assert d.run_once() == 0
        assert _gaps(d) == 0
    finally:
        d.stop()
    with RemoteFetcher.from_config(load_config(cfg)) as f:
        spans = [(s.metadata.start_offset, s.metadata.end_offset) for s in f.plan(TOPIC, 0).segments]
    assert spans == [(0, 99), (100, 299)]
    assert _verify(cfg)["problems"] == 0


def gap_at_a_segment_end(tmp_path: Path) -> tuple[Path, Path]:
    """(config, partition dir): remote [0, 99] as written, then [100, 299] copied from a cleaned
    segment whose last records (280..299) the cleaner removed, then [300, 399]."""
    tid = KafkaUuid.random()
    pdir = _original(tmp_path / "logs", tid, batches=41)
    held = tmp_path / "held"
    held.mkdir()
    for f in pdir.iterdir():
        if f.name[:20].isdigit() and int(f.name[:20]) >= 200:
            f.rename(held / f.name)
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(_config(tmp_path)))
    _tier(cfg)  # [0, 100): the segment at 100 was the active one
    for f in held.iterdir():
        f.rename(pdir / f.name)
    batches = _batches(pdir)
    out = tmp_path / "cleaned" / pdir.name
    w = PartitionWriter(out, topic_id=tid)
    for i, b in enumerate(batches[:28]):
        if _kept(i):
            w.append_at_own_offsets(b)
    w.close(clean=False)
    for f in pdir.iterdir():
        if f.suffix in (".log", ".index", ".timeindex", ".txnindex") and int(f.name[:20]) < 300:
            f.unlink()
    for f in out.iterdir():
        if f.suffix in (".log", ".index", ".timeindex"):
            shutil.copy(f, pdir / f.name)
    merge_offset_checkpoint(pdir.parent / CLEANER_OFFSET_CHECKPOINT, {TopicPartition(TOPIC, 0): 300})
    _tier(cfg)
    return cfg, pdir


def test_gap_at_the_end_of_a_tail_segment_served_from_the_next_segment(tmp_path: Path) -> None:
    """The cleaner removed the last batches of the merged segment ([0, 300) ends with a record at
    279): a fetch at 285 is served from the next remote segment's first offset, 300."""
    cfg, pdir = gap_at_a_segment_end(tmp_path)
    with RemoteFetcher.from_config(load_config(cfg)) as f:
        spans = [(s.metadata.start_offset, s.metadata.end_offset) for s in f.plan(TOPIC, 0).segments]
        assert spans == [(0, 99), (100, 299), (300, 399)]
        for at in (280, 285, 299):
            got = f.fetch(TOPIC, 0, at)
            offsets = [r.offset for _, r in iter_records(got.records) if isinstance(r, Record)]
            assert next(o for o in offsets if o >= at) == 300, at
        # a scan (Spark, rlm fetch --format arrow) across the gap: every offset the remote holds, once
        scanned = [o for b in f.scan(TOPIC, 0, start_offset=200, end_offset=400)
                   for o in b.column("offset").to_pylist()]
        want = [r.offset for b in _batches(pdir) for _, r in iter_records(b) if 200 <= r.offset < 400]
        assert scanned == want and scanned[-1] == 399 and not [o for o in scanned if 280 <= o < 300]
    assert _verify(cfg)["problems"] == 0, "a segment ending below its recorded end offset is complete"


def test_verify_reports_a_record_the_remote_copy_does_not_hold(
    tiered: tuple[Path, Path, KafkaUuid], tmp_path: Path
) -> None:
    pdir, cfg, tid = tiered
    _clean(pdir, tid, tmp_path, tamper=True)
    out = _verify(cfg)
    found = [(p["kind"], p["message"]) for part in out["partitions"] for p in part["problems"]]
    assert [k for k, _ in found] == ["local_segment_mismatch"], found
    assert "the record at offset 30 differs" in found[0][1]


def test_a_batch_across_the_remote_end_is_refused(tmp_path: Path) -> None:
    pdir = _original(tmp_path / "logs", KafkaUuid.random())
    view = LocalLogView.load(pdir)
    with pytest.raises(StraddlingBatchError, match="spans the remote end 204"):
        write_tail_segment(view.segments[2], 205, tmp_path / "staging", KafkaUuid.random())
