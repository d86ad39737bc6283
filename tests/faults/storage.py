"""Shared pieces of the storage-fault tests: the proxy fixture's helper, a broker topic tiered by
an in-process daemon whose S3 endpoint is the fault proxy, and the end-of-test checks (metadata
exactly once, ``rlm verify --deep``, records read back through the fetcher equal to those produced).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.cli import main as cli_main
from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.errors import PreflightError
from rlm.log.partition import PartitionDir
from rlm.log.records import ControlRecord, iter_records
from rlm.plugin_setup import load_rlmm
from rlm.types import RemoteLogSegmentState, TopicIdPartition
from tests.daemon.helpers import create_topic, finished, produce, s3_storage, topic_rlmm, wait_for
from tests.faults.proxy import FaultProxy
from tests.services.s3 import SeaweedFS

FIRST, REST = 10, 12_000  # records: a few before the daemon starts, then ~3 segments of 1 MiB
VALUE_SIZE = 200

#: tight per-request timeouts and few attempts: a fault shows as failed attempts within seconds
TIGHT_S3 = {"max_attempts": 2, "connect_timeout": 1.0, "read_timeout": 1.0}


def produced() -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record :class:`FaultRun` produces (``helpers.produce`` twice)."""
    out: list[tuple[int, bytes, bytes]] = []
    for n in (FIRST, REST):
        for i in range(n):
            out.append((len(out), f"k{i}".encode(), bytes([65 + i % 26]) * VALUE_SIZE))
    return out


def _samples(d: Daemon) -> list[Any]:
    """``rlm_errors_total`` samples of the partition tasks (copies), not of the health probes."""
    return [
        s
        for m in d.metrics.errors.collect()
        for s in m.samples
        if s.name.endswith("_total") and s.labels.get("task") == "partition"
    ]


def errors_total(d: Daemon) -> float:
    """Failed partition task runs (copy attempts) so far."""
    return float(sum(s.value for s in _samples(d)))


def error_kinds(d: Daemon) -> set[str]:
    return {s.labels["kind"] for s in _samples(d) if s.value > 0}


def read_back(cfg: DaemonConfig, topic: str) -> tuple[list[tuple[int, bytes, bytes]], int]:
    """Every record of the remote range by consecutive fetches, and the remote log end."""
    from fetcher import RemoteFetcher

    out: list[tuple[int, bytes, bytes]] = []
    with RemoteFetcher.from_config(cfg) as f:
        end = f.plan(topic, 0).log_end
        offset = 0
        while offset < end:
            r = f.fetch(topic, 0, offset, max_bytes=1 << 20, timeout_ms=30_000)
            for _h, rec in iter_records(r.records):
                if not isinstance(rec, ControlRecord) and rec.offset >= offset:
                    out.append((rec.offset, bytes(rec.key or b""), bytes(rec.value or b"")))
            assert r.next_offset > offset, f"no progress at offset {offset}"
            offset = r.next_offset
    return out, end


class FaultRun:
    """A real broker topic tiered to SeaweedFS by an in-process daemon *through the fault proxy*."""

    def __init__(
        self, kafka: Any, seaweedfs: SeaweedFS, proxy: FaultProxy, topic: str, tmp: Path, **s3: Any
    ) -> None:
        self.kafka, self.seaweedfs, self.proxy, self.topic, self.tmp = kafka, seaweedfs, proxy, topic, tmp
        self.bs = kafka.bootstrap
        create_topic(self.bs, topic)
        produce(self.bs, topic, FIRST, size=VALUE_SIZE)
        self.pdir_path = kafka.log_dir / f"{topic}-0"
        wait_for("partition dir", lambda: (self.pdir_path / "partition.metadata").exists())
        self.tip = TopicIdPartition(PartitionDir(self.pdir_path).topic_id, topic, 0)
        self.bucket = seaweedfs.create_bucket("faults")
        storage = s3_storage(seaweedfs, self.bucket)
        storage["config"].update(TIGHT_S3, endpoint_url=proxy.endpoint_url, **s3)
        work = tmp / "work"
        self.sidecar: dict[str, Any] = {
            "log_dirs": [str(kafka.log_dir)],
            "work_dir": str(work),
            "bootstrap_servers": self.bs,
            "storage": storage,
            "metadata": topic_rlmm(self.bs, work),
            "topics": [{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1}],
            "task_interval_ms": 200,
            "retry_backoff_ms": 100,
            "retry_backoff_max_ms": 800,
            "storage_request_timeout_ms": 2000,
            "health_check_interval_ms": 1000,
            "http": {"enabled": False},
        }
        # the start's preflight writes a probe object through TIGHT_S3's short read timeout, before any
        # fault: a loaded CI machine's SeaweedFS can miss it once (test_blackhole failed so)
        for attempt in range(3):
            try:
                self.daemon = Daemon(load_config(None, **self.sidecar)).start()
                break
            except PreflightError:
                if attempt == 2:
                    raise
        self.stopped = False

    # ---- during the run ---------------------------------------------------------------------
    def produce_segments(self) -> None:
        """The rest of the records: segments roll and become eligible while the fault is in force."""
        produce(self.bs, self.topic, REST, size=VALUE_SIZE)
        wait_for("segments rolled", lambda: len(PartitionDir(self.pdir_path).segments) >= 3)

    def want(self) -> list[int]:
        return [s.base_offset for s in PartitionDir(self.pdir_path).inactive_segments()]

    def errors(self) -> float:
        return errors_total(self.daemon)

    def wait_errors(self, at_least: float, what: str, timeout: float = 60) -> None:
        wait_for(f"{what}: {at_least} failed attempts", lambda: self.errors() >= at_least, timeout=timeout)

    def converged(self) -> bool:
        rlmm = self.daemon.ctx.rlmm  # type: ignore[union-attr]
        listed = list(rlmm.list_remote_log_segments(self.tip))
        done = [m.start_offset for m in finished(rlmm, self.tip)]
        return done == self.want() and all(
            m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in listed
        )

    def wait_converged(self, timeout: float = 90) -> None:
        wait_for("every eligible segment tiered", self.converged, timeout=timeout)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.daemon.stop(10)

    # ---- the end-of-run checks --------------------------------------------------------------
    def reader_config(self, name: str) -> tuple[dict[str, Any], DaemonConfig]:
        """A read-side config of its own (work dir, metadata consumer dir), storage *direct*."""
        work = self.tmp / name
        raw = {
            **self.sidecar,
            "work_dir": str(work),
            "metadata": topic_rlmm(self.bs, work),
            "storage": s3_storage(self.seaweedfs, self.bucket),
            "read": {"fetch_max_wait_ms": 30_000},
        }
        return raw, load_config(None, **raw)

    def check(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Exactly once in metadata, no object or open multipart upload of a failed attempt left,
        ``rlm verify --deep`` clean, records read back equal."""
        self.stop()
        want = self.want()
        _, cfg = self.reader_config("reader")
        reader = load_rlmm(cfg, 99)
        try:
            reader.on_partition_leadership_changes(set(), {self.tip})
            done = finished(reader, self.tip)
            listed = list(reader.list_remote_log_segments(self.tip))
        finally:
            reader.close()
        assert [m.start_offset for m in done] == want, "every eligible segment FINISHED exactly once"
        assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in listed), listed

        raw, _ = self.reader_config("verify")
        cfg_file = self.tmp / "verify.yaml"
        cfg_file.write_text(yaml.safe_dump(raw))
        capsys.readouterr()
        rc = cli_main(["verify", "--config", str(cfg_file), "--topic", self.topic, "--deep", "--json"])
        out = capsys.readouterr().out
        assert rc == 0, out
        [part] = json.loads(out)["partitions"]
        assert part["segments"] == len(want) and not part["problems"], part
        ids = {m.remote_log_segment_id.id.text for m in done}
        keys = [
            o["Key"]
            for o in self.seaweedfs.boto3_client().list_objects_v2(Bucket=self.bucket).get("Contents", [])
        ]
        assert keys and all(any(i in k for i in ids) for k in keys), f"objects of failed attempts: {keys}"
        assert part["objects"] == len(keys)
        pending = self.seaweedfs.boto3_client().list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        assert not pending, f"multipart uploads of failed attempts left open: {pending}"

        _, rcfg = self.reader_config("fetch")
        got, end = read_back(rcfg, self.topic)
        assert len(want) >= 2 and end > 0
        assert got == produced()[:end], "records read back differ from those produced"
