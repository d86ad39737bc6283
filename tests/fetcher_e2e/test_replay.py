"""``rlm replay`` end to end with a real consumer group, to a time older than the broker's local
log: the plan, the reset through the Admin API, and Kafka's refusal while the group is active."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from rlm.commands.readside import format_ts
from tests.fetcher_e2e.conftest import Tiered

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]


def committed(bs: str, group: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bs})
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])])
    return int(fut[group].result(timeout=30).topic_partitions[0].offset)


def replay(t: Tiered, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rlm.cli",
            "replay",
            "--config",
            str(t.config_path),
            "--topic",
            t.topic,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_replay_to_a_time_before_local_retention(tiered: Tiered) -> None:
    t = tiered
    group = f"replay-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": t.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(t.topic, 0, t.local_start)], asynchronous=False)
    c.close()
    assert committed(t.bootstrap, group, t.topic) == t.local_start
    ts, want = next(
        (ts, o) for ts, o in sorted(t.list_offsets.items()) if o is not None and 0 < o < t.remote_end
    )
    when = format_ts(ts)  # ISO-8601, as an operator would type it

    dry = replay(t, "--group", group, "--to-datetime", when)
    assert dry.returncode == 0, dry.stderr
    header, row = dry.stdout.strip().splitlines()[:2]
    assert header.split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert row.split() == [group, t.topic, "0", str(want)]
    assert "below the broker's local log start" in dry.stderr
    assert committed(t.bootstrap, group, t.topic) == t.local_start, "a dry run changes nothing"

    # an active member: Kafka refuses to reset a group that is not inactive, and so do we
    member = Consumer(
        {
            "bootstrap.servers": t.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    member.subscribe([t.topic])
    deadline = time.monotonic() + 60
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.2)
    assert member.assignment(), "the member never joined"
    try:
        busy = replay(t, "--group", group, "--to-datetime", when, "--execute")
        assert busy.returncode == 1
        assert "inactive" in busy.stderr and "active member" in busy.stderr
        assert committed(t.bootstrap, group, t.topic) == t.local_start
    finally:
        member.close()  # leaves the group

    done = replay(t, "--group", group, "--to-datetime", str(ts), "--execute", "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["partition"], r["new_offset"], r["source"], r["executed"]) for r in rows] == [
        (0, want, "remote", True)
    ]
    assert rows[0]["below_local_log_start"] and rows[0]["local_log_start"] == t.local_start
    assert committed(t.bootstrap, group, t.topic) == want, "committed = the broker's offsets_for_times answer"
