"""Remote storage down for a while: the daemon keeps running, retries with backoff, catches up after.

A moto S3 server on a fixed port is stopped and later started again on the same port (moto keeps
its buckets in this process, so they survive the outage). It goes down after the daemon started
(the start-up preflight refuses to start without storage) and before anything was eligible.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from moto.server import ThreadedMotoServer

from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from rlm.types import RemoteLogSegmentState, TopicIdPartition
from tests.daemon.helpers import create_topic, finished, produce, wait_for
from tests.services.proc import free_ports
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]


def errors_total(d: Daemon) -> float:
    return sum(s.value for m in d.metrics.errors.collect() for s in m.samples if s.name.endswith("_total"))


def test_outage_then_catch_up(kafka: Any, unique_topic: str, tmp_path: Path) -> None:
    port = free_ports(1)[0]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}),
    )
    bucket = f"outage-{unique_topic[-8:]}"
    s3.create_bucket(Bucket=bucket)
    bs = kafka.bootstrap
    create_topic(bs, unique_topic)
    produce(bs, unique_topic, 10)  # the partition exists, nothing is eligible yet
    pdir = PartitionDir(kafka.log_dir / f"{unique_topic}-0")
    wait_for("partition dir", lambda: (pdir.path / "partition.metadata").exists())
    pdir.refresh()
    tip = TopicIdPartition(pdir.topic_id, unique_topic, 0)
    cfg = load_config(
        None,
        log_dirs=[str(kafka.log_dir)],
        work_dir=str(tmp_path / "work"),
        bootstrap_servers=bs,
        storage={
            "plugin": "s3",
            "config": {
                "bucket": bucket,
                "endpoint_url": endpoint,
                "region": REGION,
                "path_style": True,
                "access_key_id": ACCESS_KEY,
                "secret_access_key": SECRET_KEY,
                "max_attempts": 1,
                "connect_timeout": 1.0,
                "read_timeout": 5.0,
            },
        },
        topics=[{"pattern": unique_topic, "remote.storage.enable": True}],
        task_interval_ms=200,
        retry_backoff_ms=100,
        retry_backoff_max_ms=800,
        http={"enabled": False},
    )
    d = Daemon(cfg).start()  # the preflight needs storage up; then it goes down before any copy
    server.stop()
    try:
        produce(bs, unique_topic, 16000)
        wait_for("segments rolled", lambda: len(PartitionDir(pdir.path).segments) >= 4)
        wait_for("failed copy attempts", lambda: errors_total(d) >= 4, timeout=60)
        time.sleep(1.0)
        st = d.ctx.status.partition(unique_topic, 0)  # type: ignore[union-attr]
        assert st.last_error is not None and "Error" in st.last_error
        assert d.scheduler.keys() == {tip}, "the partition stays scheduled while storage is down"
        assert not finished(d.ctx.rlmm, tip)  # type: ignore[union-attr]
        failures = errors_total(d)

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()  # storage is back
        pdir.refresh()
        want = [s.base_offset for s in pdir.inactive_segments()]
        rlmm = d.ctx.rlmm  # type: ignore[union-attr]

        def converged() -> bool:
            listed = list(rlmm.list_remote_log_segments(tip))
            return [m.start_offset for m in finished(rlmm, tip)] == want and all(
                m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in listed
            )

        # the status board clears the error when the task's pass ends, just after its last copy
        wait_for("caught up after the outage", lambda: converged() and d.ctx.status.partition(  # type: ignore[union-attr]
            unique_topic, 0).last_error is None, timeout=60)
        # backoff: a handful of attempts per second at most, not a hot loop
        assert failures < 200
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
        ids = {m.remote_log_segment_id.id.text for m in finished(rlmm, tip)}
        assert keys and all(any(i in k for i in ids) for k in keys), "no object of a failed attempt remains"
    finally:
        d.stop(10)
        server.stop()
