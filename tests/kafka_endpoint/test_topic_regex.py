"""KIP-848 regex subscriptions with RE2 semantics: Kafka's validity rule and message, whole-name
matching, a cache per (regex, catalog version), and DESCRIBE filtering of what a member gets."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from fetcher.kafka.consumer_groups import ConsumerGroupCoordinator, HeartbeatRequest
from fetcher.kafka.topic_regex import InvalidRegex, RegexResolver, compile_regex

TOPICS = {"orders-eu": (uuid.UUID(int=1), 2), "orders-us": (uuid.UUID(int=2), 2),
          "audit": (uuid.UUID(int=3), 1)}


def join(member: str, regex: str | None, subscribed: tuple[str, ...] = ()) -> HeartbeatRequest:
    return HeartbeatRequest(group_id="g", member_id=member, member_epoch=0, instance_id=None, rack_id=None,
                            rebalance_timeout_ms=30_000, subscribed=subscribed, regex=regex, assignor=None,
                            owned=())


@pytest.mark.parametrize("regex", ["(?=orders)", r"(a)\1", "orders-(", "[z-a]"])
def test_what_re2_does_not_compile_is_refused_with_kafkas_message(regex: str) -> None:
    with pytest.raises(InvalidRegex, match=r"^SubscribedTopicRegex `.*` is not a valid regular expression: "):
        compile_regex(regex)
    r = ConsumerGroupCoordinator().heartbeat(join("m", regex), TOPICS, now=0)
    assert r.error is ErrorCode.invalid_regular_expression and r.message and regex in r.message
    assert r.member_epoch == -1


def test_a_pattern_matches_whole_names_and_is_resolved_once_per_catalog_version() -> None:
    resolver = RegexResolver()
    assert resolver.resolve("orders-.*", TOPICS, 1) == {"orders-eu", "orders-us"}
    assert resolver.resolve("orders", TOPICS, 1) == frozenset()  # not a prefix search: matches()
    assert resolver.resolve("orders-.*", TOPICS, 1) == {"orders-eu", "orders-us"}
    assert resolver.resolutions == 2
    assert resolver.cached("orders-.*", 2) is None  # a new catalog: resolved again
    assert resolver.resolve("orders-.*", {**TOPICS, "orders-jp": TOPICS["audit"]}, 2) == {
        "orders-eu", "orders-us", "orders-jp"}
    assert resolver.resolutions == 3


def test_a_backtracking_bomb_is_linear_in_re2() -> None:
    names = {"a" * 240 + str(i): None for i in range(50)}
    assert RegexResolver().resolve("(.*.*.*.*.*.*.*.*.*)*X", names, 0) == frozenset()


def test_the_cache_is_bounded() -> None:
    resolver = RegexResolver(max_entries=4)
    for i in range(10):
        resolver.resolve(f"t{i}", TOPICS, 0)
    assert resolver.cached("t0", 0) is None and resolver.cached("t9", 0) == frozenset()


def test_a_member_gets_only_the_matches_its_principal_may_describe() -> None:
    c = ConsumerGroupCoordinator()
    r = c.heartbeat(join("m", ".*"), TOPICS, now=0, visible=frozenset({"orders-eu", "audit"}))
    assert r.error is ErrorCode.none and r.assignment is not None
    assert set(r.assignment) == {TOPICS["orders-eu"][0], TOPICS["audit"][0]}
    assert c.groups["g"].members["m"].regex_topics == {"orders-eu", "audit"}
    # another member of the same group with a wider view does not widen the first one's
    r2 = c.heartbeat(join("n", ".*"), TOPICS, now=1, visible=None)
    assert r2.error is ErrorCode.none
    target_m = c.groups["g"].target["m"]
    assert TOPICS["orders-us"][0] not in target_m
