"""Who a request is and what it may read, shared by the read faces (HTTP API, Kafka endpoint).

Pure Python, no Kafka protocol library: the HTTP API uses it without the ``kafka`` extra.

- Kafka's ACL operation bits (KIP-430's ``authorized_operations`` bitfield).
- :class:`BearerTokens`: HTTP bearer tokens mapped to principals, configured by their SHA-256
  only. A token is a random secret (≥ 128 bits), so an unsalted hash is enough to make the file
  useless to whoever reads it, as for any API-key store; a lookup by hash does not reveal the token.
- :class:`AllowRules`: standalone mode's allow rules (shell patterns; anything else is denied).
- :func:`acl_topic_ops`: the cluster's topic ACL bindings (DescribeAcls) evaluated for one
  principal and host as Kafka's StandardAuthorizer does: a matching DENY wins, then a matching
  ALLOW; READ/WRITE/DELETE/ALTER imply DESCRIBE; LITERAL names match exactly or by ``*``,
  PREFIXED by prefix; principal ``User:*`` and host ``*`` match everyone. What DescribeAcls does
  not show is not known here: ``super.users`` and ``allow.everyone.if.no.acl.found`` are taken as
  absent (a principal with no matching ALLOW is denied).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlm.errors import ConfigError

READ = 1 << 3  # Kafka's AclOperation codes, as bits of the KIP-430 bitfield
DESCRIBE = 1 << 8

# Kafka's enum codes (org.apache.kafka.common.acl / resource)
OP_ALL, OP_READ, OP_WRITE, OP_DELETE, OP_ALTER, OP_DESCRIBE = 2, 3, 4, 6, 7, 8
PERM_DENY, PERM_ALLOW = 2, 3
RESOURCE_TOPIC = 2
PATTERN_LITERAL, PATTERN_PREFIXED = 3, 4
_IMPLY_DESCRIBE = frozenset({OP_READ, OP_WRITE, OP_DELETE, OP_ALTER})
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def token_hash(token: str) -> str:
    """What a configuration holds for a bearer token: SHA-256, lowercase hex."""
    return hashlib.sha256(token.encode()).hexdigest()


class BearerTokens:
    """SHA-256 of a token -> principal (``User:name``), from the configuration's list and file."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self._by_hash: dict[str, str] = {}
        for digest, principal in pairs:
            digest = digest.strip().lower()
            if not _HEX64.match(digest):
                raise ConfigError(
                    "read.http_security bearer tokens: each is given by its SHA-256 (64 hex digits), "
                    "never in clear"
                )
            if ":" not in principal:
                principal = f"User:{principal}"
            self._by_hash[digest] = principal

    @classmethod
    def load(cls, pairs: Iterable[tuple[str, str]], path: Path | None) -> BearerTokens:
        """The list's pairs and the file's lines (``<sha256-hex> <principal>``, ``#`` comments)."""
        all_pairs = list(pairs)
        if path is not None:
            try:
                text = path.read_text()
            except OSError as e:
                raise ConfigError(
                    f"read.http_security.bearer_tokens_file: cannot read {path}: {e.strerror}"
                ) from e
            for n, line in enumerate(text.splitlines(), 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                parts = line.split()
                if len(parts) != 2:
                    raise ConfigError(
                        f"read.http_security.bearer_tokens_file: {path} line {n}: expected "
                        "'<sha256-hex> <principal>'"
                    )
                all_pairs.append((parts[0], parts[1]))
        return cls(all_pairs)

    def __bool__(self) -> bool:
        return bool(self._by_hash)

    def principal(self, token: str) -> str | None:
        return self._by_hash.get(token_hash(token))


def _match(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


class AllowRules:
    """Standalone mode: (principal, topic patterns, group patterns); anything else is denied."""

    def __init__(self, rules: Iterable[tuple[str, Sequence[str], Sequence[str]]]) -> None:
        self.rules = [(p, tuple(ts), tuple(gs)) for p, ts, gs in rules]

    def topic_ops(self, principal: str, names: Iterable[str]) -> dict[str, int]:
        """topic -> READ|DESCRIBE for each topic a rule allows the principal (others absent)."""
        return {
            n: READ | DESCRIBE
            for n in names
            if any(p == principal and _match(n, ts) for p, ts, _ in self.rules)
        }

    def group_read(self, principal: str, group: str) -> bool:
        return any(p == principal and _match(group, gs) for p, _, gs in self.rules)


@dataclass(frozen=True)
class AclBinding:
    """One ACL entry as DescribeAcls lists it (Kafka's enum codes)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def covers(self, topic: str, principal: str, host: str) -> bool:
        if self.resource_type != RESOURCE_TOPIC or self.principal not in (principal, "User:*"):
            return False
        if self.host not in ("*", host):
            return False
        if self.pattern_type == PATTERN_LITERAL:
            return self.resource_name in (topic, "*")
        return self.pattern_type == PATTERN_PREFIXED and topic.startswith(self.resource_name)


def _allows(entries: list[AclBinding], op: int) -> bool:
    if any(b.permission == PERM_DENY and b.operation in (op, OP_ALL) for b in entries):
        return False
    granting = {op, OP_ALL} | (_IMPLY_DESCRIBE if op == OP_DESCRIBE else set())
    return any(b.permission == PERM_ALLOW and b.operation in granting for b in entries)


def acl_topic_ops(
    bindings: Sequence[AclBinding], principal: str, host: str, names: Iterable[str]
) -> dict[str, int]:
    """topic -> READ/DESCRIBE bits for each topic the principal may DESCRIBE (others absent)."""
    out = {}
    for name in names:
        entries = [b for b in bindings if b.covers(name, principal, host)]
        if not _allows(entries, OP_DESCRIBE):
            continue
        out[name] = DESCRIBE | (READ if _allows(entries, OP_READ) else 0)
    return out
