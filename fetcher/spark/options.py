"""Options of the ``kafka-tiered`` source, with the names and meanings of Spark's Kafka source.

Spark hands options over lower-cased with string values; every one is checked here, on the
driver, so a typo or a malformed value fails ``load()`` with a message naming the option rather
than a task on an executor. Offsets JSON is Spark's: ``{"topic": {"0": 23, "1": -2}}`` with -2
for earliest and -1 for latest; ``assign`` is ``{"topic": [0, 1]}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fetcher.isolation import IsolationLevel
from rlm.errors import ConfigError

EARLIEST = -2
LATEST = -1

Offsets = dict[tuple[str, int], int]

# Spark Kafka source options that only tune its consumer: accepted so a job switching sources keeps
# working, with no effect here (there is no consumer).
_IGNORED = {"kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms",
            "groupidprefix", "kafka.group.id", "minpartitions", "maxrecordsperpartition"}
_KNOWN = {"subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
          "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
          "startingoffsetsbytimestampstrategy", "includeheaders", "failondataloss", "kafka.isolation.level",
          "kafka.bootstrap.servers", "rlm.config", "rlm.splitbytes", "rlm.maxbatchrows", "rlm.workdir"}
# Spark's names for the error messages (keys arrive lower-cased).
_SPELLING = {k.lower(): k for k in (
    "subscribePattern", "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "includeHeaders", "failOnDataLoss", "rlm.splitBytes", "rlm.maxBatchRows", "rlm.workDir")}


def spelled(key: str) -> str:
    return _SPELLING.get(key, key)


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options (picklable: the reader carries them to executors)."""

    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: Offsets | None = None  # None: earliest
    ending: Offsets | None = None  # None: latest
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: Offsets | None = None
    ending_by_timestamp: Offsets | None = None
    timestamp_strategy: str = "error"
    include_headers: bool = False
    fail_on_data_loss: bool = True
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    rlm_config: str | None = None
    bootstrap_servers: str | None = None
    work_dir: str | None = None
    storage: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    split_bytes: int = 128 << 20
    max_batch_rows: int = 65536

    def selects(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed (by name, pattern or assignment)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assign)


def _bad(key: str, why: str) -> ConfigError:
    return ConfigError(f"kafka-tiered option {spelled(key)!r}: {why}")


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise _bad(key, f"must be true or false, not {value!r}")
    return v == "true"


def _int(key: str, value: str, *, minimum: int | None = None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise _bad(key, f"must be an integer, not {value!r}") from None
    if minimum is not None and n < minimum:
        raise _bad(key, f"must be >= {minimum}, not {n}")
    return n


def _json(key: str, value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as e:
        raise _bad(key, f"is not valid JSON ({e}): {value!r}") from None


def _offsets(key: str, value: str, *, allowed: tuple[int, ...] = ()) -> Offsets:
    """``{"topic": {"0": 23}}``; values below 0 must be in ``allowed`` (-2 earliest, -1 latest)."""
    data = _json(key, value)
    if not isinstance(data, dict) or not data:
        raise _bad(key, f'must be a JSON object like {{"topic": {{"0": 23}}}}, not {value!r}')
    out: Offsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise _bad(key, f"topic {topic!r} must map partition numbers to offsets, not {parts!r}")
        for p, off in parts.items():
            try:
                part = int(p)
            except ValueError:
                raise _bad(key, f"partition {p!r} of topic {topic!r} is not a number") from None
            if not isinstance(off, int) or isinstance(off, bool):
                raise _bad(key, f"offset of {topic}-{p} must be an integer, not {off!r}")
            if off < 0 and off not in allowed:
                raise _bad(key, f"offset {off} of {topic}-{p} is not allowed here")
            out[(topic, part)] = off
    return out


def _assign(key: str, value: str) -> tuple[tuple[str, int], ...]:
    data = _json(key, value)
    if not isinstance(data, dict) or not data:
        raise _bad(key, f'must be a JSON object like {{"topic": [0, 1]}}, not {value!r}')
    out: list[tuple[str, int]] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and p >= 0 for p in parts):
            raise _bad(key, f"topic {topic!r} must map to a list of partition numbers, not {parts!r}")
        out.extend((topic, p) for p in parts)
    return tuple(sorted(set(out)))


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate Spark's (lower-cased, string) options; :class:`ConfigError` names the bad one."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    kw: dict[str, Any] = {}
    storage: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for key, value in opts.items():
        if key.startswith("storage.") or key.startswith("metadata."):
            section, _, name = key.partition(".")
            target = storage if section == "storage" else metadata
            if not name:
                raise _bad(key, "needs a key after the section name")
            target[name] = value
        elif key not in _KNOWN and key not in _IGNORED:
            raise _bad(key, "unknown option (see docs/spark.md for the supported ones)")
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(chosen) != 1:
        raise ConfigError("kafka-tiered: exactly one of the options 'subscribe', 'subscribePattern' or "
                          f"'assign' must be given (got {[spelled(k) for k in chosen] or 'none'})")
    if "subscribe" in opts:
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise _bad("subscribe", "names no topic")
        kw["subscribe"] = topics
    elif "subscribepattern" in opts:
        try:
            re.compile(opts["subscribepattern"])
        except re.error as e:
            raise _bad("subscribepattern", f"is not a valid regular expression ({e})") from None
        kw["pattern"] = opts["subscribepattern"]
    else:
        kw["assign"] = _assign("assign", opts["assign"])

    start = opts.get("startingoffsets", "earliest").strip()
    if start.lower() == "latest":
        raise _bad("startingoffsets", "'latest' is not allowed for a batch query")
    if start.lower() != "earliest":
        kw["starting"] = _offsets("startingoffsets", start, allowed=(EARLIEST,))
    end = opts.get("endingoffsets", "latest").strip()
    if end.lower() == "earliest":
        raise _bad("endingoffsets", "'earliest' is not allowed as an ending offset")
    if end.lower() != "latest":
        kw["ending"] = _offsets("endingoffsets", end, allowed=(LATEST,))
    if kw.get("starting") and kw.get("ending"):
        if set(kw["starting"]) != set(kw["ending"]):
            raise _bad("endingoffsets", "must name the same topic-partitions as 'startingOffsets'")
        for tp, first in kw["starting"].items():
            last = kw["ending"][tp]
            if first >= 0 and last >= 0 and first > last:
                raise _bad("endingoffsets",
                           f"ending offset {last} of {tp[0]}-{tp[1]} is before the starting {first}")
    for key, name in (("startingtimestamp", "starting_timestamp"), ("endingtimestamp", "ending_timestamp")):
        if key in opts:
            kw[name] = _int(key, opts[key], minimum=0)
    for key, name in (("startingoffsetsbytimestamp", "starting_by_timestamp"),
                      ("endingoffsetsbytimestamp", "ending_by_timestamp")):
        if key in opts:
            kw[name] = _offsets(key, opts[key])
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise _bad("startingoffsetsbytimestampstrategy", f"must be error or latest, not {strategy!r}")
    kw["timestamp_strategy"] = strategy
    if "includeheaders" in opts:
        kw["include_headers"] = _bool("includeheaders", opts["includeheaders"])
    if "failondataloss" in opts:
        kw["fail_on_data_loss"] = _bool("failondataloss", opts["failondataloss"])
    if "kafka.isolation.level" in opts:
        try:
            kw["isolation"] = IsolationLevel.parse(opts["kafka.isolation.level"])
        except ValueError as e:
            raise _bad("kafka.isolation.level", str(e)) from None
    if "rlm.splitbytes" in opts:
        kw["split_bytes"] = _int("rlm.splitbytes", opts["rlm.splitbytes"], minimum=1)
    if "rlm.maxbatchrows" in opts:
        kw["max_batch_rows"] = _int("rlm.maxbatchrows", opts["rlm.maxbatchrows"], minimum=1)
    kw["rlm_config"] = opts.get("rlm.config")
    kw["bootstrap_servers"] = opts.get("kafka.bootstrap.servers")
    kw["work_dir"] = opts.get("rlm.workdir")
    if not kw["rlm_config"] and "plugin" not in storage and not kw["work_dir"]:
        raise ConfigError("kafka-tiered: say where the tiered data is: option 'rlm.config' (the file "
                          "`rlm run` uses), or inline 'storage.plugin'/'storage.*' and 'metadata.*' options")
    return SourceOptions(storage=storage, metadata=metadata, **kw)
