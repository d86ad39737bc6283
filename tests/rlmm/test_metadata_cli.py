"""``rlm metadata dump`` from the embedded store and from a real metadata topic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlm.cli import main
from rlm.exit_codes import ExitCode
from rlm.types import (
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from rlmm.file import FileRemoteLogMetadataManager
from rlmm.file_log import LOG_FILE
from rlmm.serde import serialize
from rlmm.testing import new_tp, seg, upd
from tests.services.kafka import KafkaCluster

S = RemoteLogSegmentState


def test_dump_file_store_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tp, other = new_tp(), new_tp()
    a = seg(tp, 0, 99, {0: 0, 2: 50})
    with FileRemoteLogMetadataManager.open(tmp_path) as m:
        m.add_remote_log_segment_metadata(a)
        m.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_FINISHED, custom=b"\x01\x02"))
        m.add_remote_log_segment_metadata(seg(other, 0, 9, {0: 0}))
    capsys.readouterr()
    assert main(["metadata", "dump", "--dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("record:0,position:8,type:RemoteLogSegmentMetadata,version:0,event-value:{")
    value = json.loads(lines[1].split("event-value:", 1)[1])
    assert value["state"] == "COPY_SEGMENT_FINISHED" and value["customMetadata"] == "AQI="
    assert value["remoteLogSegmentId"]["id"] == a.remote_log_segment_id.id.text

    assert main(["metadata", "dump", "--dir", str(tmp_path), "--json", "--user-topic", tp.topic]) == 0
    objs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["type"] for o in objs] == ["RemoteLogSegmentMetadata", "RemoteLogSegmentMetadataUpdate"]
    assert objs[0]["value"]["segmentLeaderEpochs"] == {"0": 0, "2": 50}
    assert objs[0]["value"]["remoteLogSegmentId"]["topicIdPartition"]["topicId"] == tp.topic_id.text


def test_dump_file_store_corruption_is_one_error_line(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with FileRemoteLogMetadataManager.open(tmp_path) as m:
        m.add_remote_log_segment_metadata(seg(new_tp(), 0, 9, {0: 0}))
        m.add_remote_log_segment_metadata(seg(new_tp(), 0, 9, {0: 0}))
    data = bytearray((tmp_path / LOG_FILE).read_bytes())
    data[20] ^= 0xFF
    (tmp_path / LOG_FILE).write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["metadata", "dump", "--dir", str(tmp_path)]) == ExitCode.FAILURE
    err = capsys.readouterr().err
    assert err.startswith("rlm: error: ") and "metadata.log@8" in err and "corrupt frame" in err


@pytest.mark.kafka
def test_dump_topic(kafka: KafkaCluster, unique_topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    created = admin.create_topics([NewTopic(unique_topic, num_partitions=3, replication_factor=1)])
    created[unique_topic].result(30)
    tp = new_tp()
    a = seg(tp, 0, 99, {0: 0})
    marked = RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 5, 1)
    records = [(0, serialize(a)), (0, serialize(upd(a, S.COPY_SEGMENT_FINISHED))), (0, b"\x01\x09\x00junk"),
               (2, serialize(marked))]
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    for partition, value in records:
        producer.produce(unique_topic, value=value, partition=partition)
    assert producer.flush(30) == 0

    assert main(["metadata", "dump", "--bootstrap-server", kafka.bootstrap, "--topic", unique_topic]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(",type:")[0] if ",type:" in line else line.split(",error:")[0] for line in lines] == [
        "partition:0,message-offset:0", "partition:0,message-offset:1", "partition:0,message-offset:2",
        "partition:2,message-offset:0"]
    assert "type:RemoteLogSegmentMetadataUpdate,version:0" in lines[1]
    assert lines[2].startswith("partition:0,message-offset:2,error:unknown apiKey 9")
    assert '"state":"DELETE_PARTITION_MARKED"' in lines[3]

    assert main(["metadata", "dump", "--bootstrap-server", kafka.bootstrap, "--topic", unique_topic,
                 "--partition", "2", "--json"]) == 0
    (obj,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert obj["partition"] == 2 and obj["type"] == "RemotePartitionDeleteMetadata"
    assert obj["value"]["topicIdPartition"]["topic"] == tp.topic


@pytest.mark.kafka
def test_dump_topic_missing(kafka: KafkaCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metadata", "dump", "--bootstrap-server", kafka.bootstrap, "--topic", "no-such-topic-xyz",
                 "--timeout-ms", "5000"]) == ExitCode.FAILURE
    assert "not found" in capsys.readouterr().err
