"""``rlm fetch --format text``: kcat-like lines, from a unit of rendering to a real tiered read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from rlm.commands.record_text import record_line, show
from rlm.log.checkpoints import MetaProperties
from rlm.log.model import Record, TimestampType
from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
from rlm.types import KafkaUuid, TopicPartition
from tests.daemon.test_standalone import cfg_for, run_once

ROOT = Path(__file__).resolve().parents[2]
TS = 1763629200250  # 2025-11-20T09:00:00.250Z


Headers = tuple[tuple[str, bytes | None], ...]


def _rec(key: bytes | None, value: bytes | None, headers: Headers = ()) -> Record:
    return Record(7, TS, TimestampType.CREATE_TIME, key, value, headers)


def test_utf8_shown_as_text_with_iso_timestamp() -> None:
    line = record_line(3, _rec(b"k\xc3\xa9", "värde €".encode(), (("trace", b"abc"), ("n", None))))
    assert line == ("Partition: 3\tOffset: 7\tTimestamp: 2025-11-20T09:00:00.250Z\tKey: ké\t"
                    "Headers: trace=abc,n=NULL\tValue: värde €")


def test_non_utf8_and_line_breaking_bytes_are_escaped() -> None:
    assert show(b"\xff\xfeok\x00") == "\\xff\\xfeok\\x00"
    assert show(b"a\tb\nc\\d\re") == "a\\tb\\nc\\\\d\\re"
    assert show(b"\xe2\x82") == "\\xe2\\x82"  # a truncated UTF-8 sequence
    assert show(b"\xe2\x80\xa8") == "\\u2028"  # a line separator is not printable
    assert show(None) == "NULL" and show(b"") == ""
    line = record_line(0, _rec(None, b"\x80\x81", (("a=b", b"x,y"),)))
    assert "\n" not in line and line.count("\t") == 5
    assert line.endswith("Key: NULL\tHeaders: a\\x3db=x\\x2cy\tValue: \\x80\\x81")


def test_cli_prints_tiered_records_as_text(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    w = PartitionWriter(logs / "txt-0", topic_id=KafkaUuid.random(), config=WriterConfig(segment_bytes=1024))
    for b in range(30):
        w.append([(f"k{b}".encode(), b"\xff\xfe binary" if b == 2 else f"value {b}".encode(),
                   (("h", f"{b}".encode()),), TS + b)], now=TS + b)
    w.close()
    write_log_dir_files(logs, [(TopicPartition("txt", 0), w.log_end_offset)],
                        meta=MetaProperties(1, "text-cluster-00001", 1))
    run_once(cfg_for(logs, tmp_path / "work"))
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({"work_dir": str(tmp_path / "work")}))
    cmd = [sys.executable, "-m", "rlm.cli", "fetch", "-c", str(cfg), "-t", "txt", "--offset", "1",
           "--count", "3", "--format", "text"]
    r = subprocess.run(cmd, capture_output=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert r.stdout.decode().splitlines() == [
        "Partition: 0\tOffset: 1\tTimestamp: 2025-11-20T09:00:00.251Z\tKey: k1\tHeaders: h=1\tValue: value 1",
        "Partition: 0\tOffset: 2\tTimestamp: 2025-11-20T09:00:00.252Z\tKey: k2\tHeaders: h=2\t"
        "Value: \\xff\\xfe binary",
        "Partition: 0\tOffset: 3\tTimestamp: 2025-11-20T09:00:00.253Z\tKey: k3\tHeaders: h=3\tValue: value 3",
    ]
