"""Every fixture variant read through the read side's faces returns exactly what the broker's own
consumer read (both isolation levels) and what ListOffsets answered — from the broker's
``rsm.config`` lines pasted into ``rlm.yaml`` and its raw ``__remote_log_metadata`` records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fetcher import RemoteFetcher
from rlm.cli import main as cli_main
from rlm.commands.readside import lookup
from rlm.config import load_config
from tests.aiven.helpers import VARIANTS, expected, topics_in, variant_dir
from tests.fixtures.aiven.build import record_digest

_TYPES = {"CreateTime": 1, "LogAppendTime": 2}


def _partitions(variant: str) -> list[tuple[str, int]]:
    out = []
    for d in sorted((variant_dir(variant) / "storage").iterdir()):
        out += [(d.name[:-23], int(p.name)) for p in sorted(d.iterdir())]
    return out


def _cli_fetch(config: Path, topic: str, partition: int, level: str,
               capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    code = cli_main(["fetch", "--config", str(config), "--topic", topic, "--partition", str(partition),
                     "--offset", "0", "--isolation", level, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = []
    for line in out.splitlines():
        r = json.loads(line)
        rows.append({"topic": topic, "partition": partition, "offset": r["offset"],
                     "timestamp": r["timestamp"], "timestamp_type": _TYPES[r["timestamp_type"]],
                     "leader_epoch": r["partition_leader_epoch"],
                     "digest": record_digest(r["key"], r["value"], r["headers"])})
    return rows


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("level", ["read_uncommitted", "read_committed"])
def test_cli_fetch_returns_what_the_brokers_consumer_read(
        variant: str, level: str, aiven_configs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    want = expected(variant, level)
    got: list[dict[str, Any]] = []
    for topic, partition in _partitions(variant):
        got += _cli_fetch(aiven_configs[variant], topic, partition, level, capsys)
    key = lambda r: (r["topic"], r["partition"], r["offset"])  # noqa: E731
    assert len(got) == len(want)
    assert sorted(got, key=key) == sorted(want, key=key)


@pytest.mark.parametrize("variant", VARIANTS)
def test_offsets_for_the_recorded_timestamps(variant: str, aiven_configs: dict[str, Path]) -> None:
    asked = json.loads((variant_dir(variant) / "offsets_for_times.json").read_text())
    topics = topics_in(variant)
    cfg = load_config(aiven_configs[variant])
    checked = 0
    with RemoteFetcher.from_config(cfg) as f:
        for q in asked:
            if q["topic"] not in topics:
                continue
            a = lookup(f, q["topic"], q["partition"], q["query_timestamp"])
            got = (-1, -1) if a is None else (a.offset, a.timestamp)
            assert got == (q["offset"], q["timestamp"]), q
            if a is not None:
                assert a.leader_epoch == q["leader_epoch"], q
            checked += 1
    assert checked >= 50


@pytest.mark.parametrize("variant", VARIANTS)
def test_cli_offsets_earliest_and_a_recorded_time(variant: str, aiven_configs: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    asked = json.loads((variant_dir(variant) / "offsets_for_times.json").read_text())
    lo = json.loads((variant_dir(variant) / "list_offsets.json").read_text())
    q = next(x for x in asked if x["topic"] in topics_in(variant) and x["offset"] > 0)
    capsys.readouterr()
    earliest = lo[f"{q['topic']}/{q['partition']}"]["read_uncommitted"]["earliest"]["offset"]
    for ts, want in ((q["query_timestamp"], q["offset"]), ("earliest", earliest)):
        code = cli_main(["offsets", "--config", str(aiven_configs[variant]), "--topic", q["topic"],
                         "--partition", str(q["partition"]), "--timestamp", str(ts), "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert json.loads(out.splitlines()[0])["offset"] == want
