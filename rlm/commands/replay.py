"""``rlm replay``: rewind a consumer group to a point in time, over remote + local data.

    rlm replay --config F --group G --topic T --to-datetime TS [--execute] [--json]

Like ``kafka-consumer-groups --reset-offsets --to-datetime TS --dry-run``, except that the
offset for TS is looked up in remote storage too, so a time older than the broker's local
retention still maps to the right offset. Per partition: the first offset whose timestamp is
>= TS (remote first, then the broker's ListOffsets); when no record is that late, the log end
(as Kafka does). Without ``--execute`` only the plan is printed. With it the group's committed
offsets are reset through the Admin API (``alter_consumer_group_offsets``) — refused while the
group has active members, as Kafka refuses.

A warning per partition says when the target lies below the broker's local log start: the
broker cannot serve those records (its consumers would hit OFFSET_OUT_OF_RANGE and reset by
``auto.offset.reset``); read them through ``rlm fetch``, the HTTP API, the Kafka-protocol
endpoint or Spark.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from rlm.commands.readside import LATEST, add_config_arg, lookup, open_fetcher, parse_timestamp, partitions_of
from rlm.errors import ConfigError, MetadataUnavailableError, RlmError

if TYPE_CHECKING:  # the read core loads when the command runs, not for `rlm --help`
    from fetcher import RemoteFetcher

_TIMEOUT_S = 30.0


class GroupNotInactiveError(RlmError):
    """The consumer group has active members: Kafka resets offsets only of an inactive group."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("replay", help="rewind a consumer group to a point in time (remote + local)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arg(p)
    p.add_argument("--group", "-g", required=True, help="the consumer group")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", "-p", type=int, action="append",
                   help="only these partitions (repeatable; default: every partition)")
    p.add_argument("--to-datetime", type=parse_timestamp, required=True,
                   help="ISO-8601, epoch ms or e.g. 2h-ago")
    p.add_argument("--execute", action="store_true", help="reset the committed offsets (default: dry run)")
    p.add_argument("--json", action="store_true", help="one JSON object per partition")
    p.add_argument("--bootstrap-server", help="override the config's bootstrap_servers")
    p.set_defaults(func=replay)


def _admin(f: RemoteFetcher) -> Any:
    from confluent_kafka.admin import AdminClient

    assert f.broker is not None
    return AdminClient(f.broker.client_config)


def plan_reset(f: RemoteFetcher, group: str, topic: str, partitions: list[int] | None,
               timestamp: int) -> list[dict[str, Any]]:
    """Per partition: current committed offset, target offset, where the answer came from, and
    whether the target lies below the broker's local log start."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    assert f.broker is not None
    parts = partitions or partitions_of(f, topic)
    admin = _admin(f)
    fut = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in parts])])
    try:
        committed = {tp.partition: tp.offset for tp in fut[group].result(timeout=_TIMEOUT_S).topic_partitions}
    except Exception as e:
        raise MetadataUnavailableError(f"group {group!r}: cannot list committed offsets: {e}") from e
    rows = []
    for p in parts:
        a = lookup(f, topic, p, timestamp)
        if a is None:  # no record that late: the log end, as kafka-consumer-groups does
            a = lookup(f, topic, p, LATEST)
        assert a is not None
        local_start = f.broker.local_log_start(topic, p)
        cur = committed.get(p, -1)
        rows.append({"group": group, "topic": topic, "partition": p,
                     "current_offset": cur if cur is not None and cur >= 0 else None,
                     "new_offset": a.offset, "source": a.source, "timestamp": a.timestamp,
                     "local_log_start": local_start, "below_local_log_start": a.offset < local_start})
    return rows


def check_inactive(admin: Any, group: str) -> None:
    """Refuse like Kafka: offsets of a group with members (any state but Empty/Dead) stay."""
    desc = admin.describe_consumer_groups([group])[group].result(timeout=_TIMEOUT_S)
    state = getattr(desc.state, "name", str(desc.state)).upper()
    if desc.members or state not in ("EMPTY", "DEAD", "UNKNOWN"):
        raise GroupNotInactiveError(
            f"group {group!r}: assignments can only be reset if the group is inactive, but the "
            f"current state is {state} with {len(desc.members)} active member(s)")


def execute(f: RemoteFetcher, rows: list[dict[str, Any]]) -> None:
    """Commit the new offsets for the group through ``alter_consumer_group_offsets``."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    group = rows[0]["group"]
    admin = _admin(f)
    check_inactive(admin, group)
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(r["topic"], r["partition"], r["new_offset"])
                                               for r in rows])
    try:
        res = admin.alter_consumer_group_offsets([req])[group].result(timeout=_TIMEOUT_S)
    except Exception as e:
        raise GroupNotInactiveError(f"group {group!r}: the broker refused the offset reset: {e}") from e
    bad = [f"{tp.topic}-{tp.partition}: {tp.error}" for tp in res.topic_partitions if tp.error is not None]
    if bad:
        raise GroupNotInactiveError(f"group {group!r}: the broker refused the offset reset: {'; '.join(bad)}")


def render(rows: list[dict[str, Any]]) -> str:
    """``kafka-consumer-groups --reset-offsets`` layout (GROUP TOPIC PARTITION NEW-OFFSET)."""
    def line(g: object, t: object, p: object, o: object) -> str:
        return f"{g!s:<30} {t!s:<30} {p!s:<10} {o!s:<15}"

    lines = ["", line("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
    lines += [line(r["group"], r["topic"], r["partition"], r["new_offset"]) for r in rows]
    return "\n".join(lines)


def replay(args: argparse.Namespace) -> int:
    with open_fetcher(args.config, args.bootstrap_server) as f:
        if f.broker is None:
            raise ConfigError("rlm replay needs the broker: set bootstrap_servers in the config "
                              "or pass --bootstrap-server")
        rows = plan_reset(f, args.group, args.topic, args.partition, args.to_datetime)
        for r in rows:
            if r["below_local_log_start"]:
                lo, hi = r["new_offset"], r["local_log_start"]
                print(f"rlm: warning: {r['topic']}-{r['partition']}: offset {lo} is below the broker's "
                      f"local log start {hi}; the broker cannot serve offsets {lo}..{hi - 1} (read them "
                      "with rlm fetch, the HTTP API, the Kafka-protocol endpoint or Spark)", file=sys.stderr)
        if args.execute:
            execute(f, rows)
    if args.json:
        for r in rows:
            sys.stdout.write(json.dumps({**r, "executed": bool(args.execute)}) + "\n")
    else:
        print(render(rows))
        if not args.execute:
            print("\nDry run: nothing changed (add --execute to reset the committed offsets).")
    return 0
