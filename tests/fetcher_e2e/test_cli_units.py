"""The read commands' argument parsing and rendering (no services)."""

from __future__ import annotations

import argparse
import io

import pytest

from rlm.cli import build_parser
from rlm.commands.readside import Progress, format_ts, parse_timestamp
from rlm.commands.replay import render


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("earliest", -2),
        ("LATEST", -1),
        ("1763629200000", 1763629200000),
        ("2025-11-20T09:00:00Z", 1763629200000),
        ("2025-11-20T09:00:00", 1763629200000),  # no zone: UTC
        ("2025-11-20T10:00:00+01:00", 1763629200000),
        ("2025-11-20T09:00:00.250Z", 1763629200250),
        ("2h-ago", 1_000_000_000 - 2 * 3_600_000),
        ("90s-ago", 1_000_000_000 - 90_000),
        ("1.5d-ago", 1_000_000_000 - 129_600_000),
    ],
)
def test_parse_timestamp(text: str, want: int) -> None:
    assert parse_timestamp(text, now_ms=1_000_000_000) == want


def test_parse_timestamp_rejects_garbage_naming_the_forms() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="ISO-8601, epoch ms"):
        parse_timestamp("yesterday-ish")


def test_format_ts_round_trips() -> None:
    assert format_ts(1763629200250) == "2025-11-20T09:00:00.250Z"
    assert parse_timestamp(format_ts(1763629200250)) == 1763629200250
    assert format_ts(-1) == "-"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal() -> None:
    pipe = io.StringIO()
    p = Progress("fetch", stream=pipe)
    p.update("1 records", force=True)
    p.done()
    assert pipe.getvalue() == ""
    tty = _Tty()
    p = Progress("fetch", stream=tty)
    p.update("1 records", force=True)
    assert "fetch: 1 records" in tty.getvalue()
    p.done()
    assert tty.getvalue().endswith("\r\x1b[K")


def test_replay_plan_layout_is_kafka_consumer_groups() -> None:
    out = render([{"group": "g1", "topic": "orders", "partition": 3, "new_offset": 42}])
    lines = out.splitlines()
    assert lines[0] == ""
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert lines[2].split() == ["g1", "orders", "3", "42"]
    assert lines[2].index("orders") == lines[1].index("TOPIC") == 31


def test_commands_registered_with_their_options() -> None:
    p = build_parser()
    a = p.parse_args(
        ["fetch", "-c", "x.yaml", "-t", "t", "--timestamp", "1h-ago", "--count", "5", "--format", "raw"]
    )
    assert (a.count, a.format, a.offset) == (5, "raw", None)
    with pytest.raises(SystemExit):  # --offset and --timestamp exclude each other
        p.parse_args(["fetch", "-c", "x.yaml", "-t", "t", "--offset", "1", "--timestamp", "1"])
    a = p.parse_args(["offsets", "-c", "x.yaml", "-t", "t", "--timestamp", "earliest", "--json"])
    assert (a.timestamp, a.partition, a.json) == (-2, None, True)
    a = p.parse_args(
        ["replay", "-c", "x.yaml", "-g", "g", "-t", "t", "--to-datetime", "2025-11-20T09:00:00Z"]
    )
    assert (a.to_datetime, a.execute) == (1763629200000, False)
