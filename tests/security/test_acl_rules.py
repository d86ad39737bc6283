"""How :mod:`fetcher.cluster_auth.acl` evaluates the cluster's topic ACL bindings for a bearer-token principal
(Kafka's StandardAuthorizer rules), how it reads token hashes, and the standalone allow rules.
The broker-backed path is tested end to end in ``test_http_bearer.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from fetcher.cluster_auth.acl import (
    DESCRIBE,
    OP_ALL,
    OP_DESCRIBE,
    OP_READ,
    OP_WRITE,
    PATTERN_LITERAL,
    PATTERN_PREFIXED,
    PERM_ALLOW,
    PERM_DENY,
    READ,
    RESOURCE_TOPIC,
    AclBinding,
    AllowRules,
    BearerTokens,
    acl_topic_ops,
    token_hash,
)
from rlm.errors import ConfigError

pytestmark = [pytest.mark.security]
NAMES = ["orders-eu", "orders-us", "order", "payments", "audit"]


def _b(
    name: str,
    op: int,
    perm: int = PERM_ALLOW,
    pattern: int = PATTERN_LITERAL,
    who: str = "User:ann",
    host: str = "*",
) -> AclBinding:
    return AclBinding(RESOURCE_TOPIC, name, pattern, who, host, op, perm)


def test_allow_deny_prefix_wildcard_and_implied_describe() -> None:
    bindings = [
        _b("orders-", OP_READ, pattern=PATTERN_PREFIXED),  # orders-eu, orders-us; not "order"
        _b("orders-us", OP_READ, PERM_DENY),  # a DENY wins over the prefixed ALLOW (READ only)
        _b("payments", OP_WRITE),  # WRITE implies DESCRIBE, not READ
        _b("order", OP_ALL, host="10.0.0.9"),  # only from that host
        _b("audit", OP_DESCRIBE, who="User:*"),  # every principal …
        _b("audit", OP_ALL, PERM_DENY, who="User:bea"),  # … but bea, denied everything
        _b("*", OP_DESCRIBE, who="User:cy"),  # every topic, for cy
    ]
    assert acl_topic_ops(bindings, "User:ann", "127.0.0.1", NAMES) == {
        "orders-eu": READ | DESCRIBE,
        "orders-us": DESCRIBE,
        "payments": DESCRIBE,
        "audit": DESCRIBE,
    }
    assert acl_topic_ops(bindings, "User:ann", "10.0.0.9", ["order"]) == {"order": READ | DESCRIBE}
    assert acl_topic_ops(bindings, "User:bea", "127.0.0.1", NAMES) == {}
    assert acl_topic_ops(bindings, "User:cy", "127.0.0.1", NAMES) == dict.fromkeys(NAMES, DESCRIBE)
    assert acl_topic_ops([], "User:ann", "127.0.0.1", NAMES) == {}  # no ACL: denied


def test_tokens_are_configured_by_hash_only(tmp_path: Path) -> None:
    f = tmp_path / "tokens"
    f.write_text(f"# comment\n\n{token_hash('t-1')} User:ann  # trailing comment\n{token_hash('t-2')} bea\n")
    tokens = BearerTokens.load([(token_hash("t-3").upper(), "User:cy")], f)
    assert [tokens.principal(t) for t in ("t-1", "t-2", "t-3", "t-4")] == [
        "User:ann",
        "User:bea",
        "User:cy",
        None,
    ]
    f.write_text("t-1 User:ann\n")
    with pytest.raises(ConfigError, match="SHA-256"):
        BearerTokens.load([], f)
    f.write_text(f"{token_hash('t-1')}\n")
    with pytest.raises(ConfigError, match="line 1"):
        BearerTokens.load([], f)


def test_allow_rules() -> None:
    rules = AllowRules([("User:ann", ["orders-*"], ["ann-*"])])
    assert rules.topic_ops("User:ann", NAMES) == {"orders-eu": READ | DESCRIBE, "orders-us": READ | DESCRIBE}
    assert rules.topic_ops("User:bea", NAMES) == {}
    assert rules.group_read("User:ann", "ann-1") and not rules.group_read("User:ann", "bea-1")
