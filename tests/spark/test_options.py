"""Option parsing and planning helpers of ``kafka-tiered`` (no Spark needed)."""

from __future__ import annotations

import re

import pytest

from fetcher.fetch import IsolationLevel
from fetcher.spark.options import EARLIEST, LATEST, parse_options
from rlm.errors import ConfigError

BASE = {"rlm.config": "/etc/rlm.yaml"}


def test_spark_names_and_meanings() -> None:
    o = parse_options({**BASE, "subscribe": "a, b", "startingoffsets": '{"a": {"0": 5, "1": -2}}',
                       "endingoffsets": '{"a": {"0": -1, "1": 9}}', "includeheaders": "TRUE",
                       "failondataloss": "false", "kafka.isolation.level": "read_committed",
                       "storage.plugin": "s3", "storage.bucket": "x", "metadata.dir": "/m"})
    assert o.subscribe == ("a", "b") and o.selects("b") and not o.selects("c")
    assert o.starting == {("a", 0): 5, ("a", 1): EARLIEST}
    assert o.ending == {("a", 0): LATEST, ("a", 1): 9}
    assert o.include_headers and not o.fail_on_data_loss
    assert o.isolation is IsolationLevel.READ_COMMITTED
    assert o.storage == {"plugin": "s3", "bucket": "x"} and o.metadata == {"dir": "/m"}
    p = parse_options({**BASE, "subscribepattern": "ev.*"})
    assert p.selects("events") and not p.selects("xevents")
    a = parse_options({**BASE, "assign": '{"t": [1, 0]}'})
    assert a.assign == (("t", 0), ("t", 1)) and a.selects("t")


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "a", "startingoffsets": '{"a": {"0": -1}}'}, "'startingOffsets': offset -1 of a-0"),
    ({"subscribe": "a", "endingoffsets": '{"a": {"0": -2}}'}, "'endingOffsets': offset -2 of a-0"),
    ({"subscribe": "a", "startingoffsets": '{"a": {"0": 9}}', "endingoffsets": '{"a": {"0": 3}}'},
     "before the starting 9"),
    ({"subscribe": "a", "startingoffsets": '{"a": {"0": 1}}', "endingoffsets": '{"b": {"0": 3}}'},
     "same topic-partitions"),
    ({"subscribepattern": "("}, "'subscribePattern': is not a valid regular expression"),
    ({"assign": '{"a": ["x"]}'}, "'assign': topic 'a' must map to a list"),
    ({"subscribe": "a", "storage.": "x"}, "'storage.': needs a key"),
    ({"subscribe": "a", "rlm.splitbytes": "0"}, "'rlm.splitBytes': must be >= 1"),
    ({"subscribe": "a", "startingoffsetsbytimestampstrategy": "oldest"}, "must be error or latest"),
    ({"subscribe": ""}, "'subscribe': names no topic"),
])
def test_malformed_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_options({**BASE, **options})


def test_location_is_required() -> None:
    with pytest.raises(ConfigError, match=r"rlm\.config"):
        parse_options({"subscribe": "a"})
