"""Logins against the standalone users (fetcher/kafka/local_auth.py) do the same work whether the
user exists or not, so neither an answer's content nor its cost tells an attacker which users exist.

The work is counted, never timed: every PBKDF2 (algorithm, iterations), every HMAC and every hash
the server computes during a login, for a wrong password of a real user and for an unknown user,
through the same exchange a SASL connection drives.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import hmac
import os
from collections.abc import Iterator
from typing import Any

import pytest

from fetcher.kafka.local_auth import LocalUsers, scram_credential
from rlm.config import ListenerSecurity

pytestmark = [pytest.mark.security]

PASSWORD = "the-right-password-1"


@pytest.fixture()
def users() -> Iterator[LocalUsers]:
    security = ListenerSecurity.model_validate({
        "security.protocol": "SASL_PLAINTEXT",
        "users": [{  # both mechanisms, with Kafka's default 4096 iterations (as made-up ones)
            "name": "alice",
            "scram_sha_256": scram_credential(PASSWORD, "SCRAM-SHA-256"),
            "scram_sha_512": scram_credential(PASSWORD, "SCRAM-SHA-512"),
        }],
        "allow": [],
    })
    u = LocalUsers(security)
    yield u
    u.close()


class _Work:
    """Counts the hashing the login code does (it calls these through the hashlib and hmac modules)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: collections.Counter[tuple[Any, ...]] = collections.Counter()
        pbkdf2, digest, new = hashlib.pbkdf2_hmac, hmac.digest, hashlib.new

        def counted_pbkdf2(algo: str, password: bytes, salt: bytes, iterations: int, *a: Any) -> bytes:
            self.calls[("pbkdf2", algo, iterations)] += 1
            return pbkdf2(algo, password, salt, iterations, *a)

        def counted_digest(key: bytes, msg: bytes, algo: str) -> bytes:
            self.calls[("hmac", algo)] += 1
            return digest(key, msg, algo)

        def counted_new(algo: str, *a: Any, **kw: Any) -> Any:
            self.calls[("hash", algo)] += 1
            return new(algo, *a, **kw)

        monkeypatch.setattr(hashlib, "pbkdf2_hmac", counted_pbkdf2)
        monkeypatch.setattr(hmac, "digest", counted_digest)
        monkeypatch.setattr(hashlib, "new", counted_new)

    def take(self) -> dict[tuple[Any, ...], int]:
        out = dict(self.calls)
        self.calls.clear()
        return out


def _plain(users: LocalUsers, user: str, password: str) -> str | None:
    token = b"\0" + user.encode() + b"\0" + password.encode()
    error, _, done = asyncio.run(users.exchange("PLAIN").step(token))
    assert done
    return error


def _scram(users: LocalUsers, mechanism: str, user: str, password: str) -> str | None:
    """A whole SCRAM exchange as a client computes it (the client's own hashing is not counted:
    it runs here, between the server's steps, with the real functions)."""
    ex = users.exchange(mechanism)
    algo = "sha256" if mechanism.endswith("256") else "sha512"
    nonce = base64.b64encode(os.urandom(18)).decode()
    bare = f"n={user},r={nonce}"
    error, server_first, done = asyncio.run(ex.step(f"n,,{bare}".encode()))
    assert error is None and not done
    fields = dict(f.split("=", 1) for f in server_first.decode().split(","))
    salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
    with pytest.MonkeyPatch.context() as real:  # the client side: not the server's work
        real.setattr(hashlib, "pbkdf2_hmac", _REAL_PBKDF2)
        real.setattr(hmac, "digest", _REAL_DIGEST)
        real.setattr(hashlib, "new", _REAL_NEW)
        salted = hashlib.pbkdf2_hmac(algo, password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", algo)
        stored = hashlib.new(algo, client_key).digest()
        without = f"c=biws,r={fields['r']}"
        auth = f"{bare},{server_first.decode()},{without}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.digest(stored, auth, algo), strict=True))
    error, _, done = asyncio.run(ex.step(f"{without},p={base64.b64encode(proof).decode()}".encode()))
    assert done
    return error


_REAL_PBKDF2, _REAL_DIGEST, _REAL_NEW = hashlib.pbkdf2_hmac, hmac.digest, hashlib.new


def test_plain_hashes_the_same_for_an_unknown_user_as_for_a_wrong_password(
    users: LocalUsers, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _plain(users, "alice", PASSWORD) is None  # the right password logs in
    work = _Work(monkeypatch)
    assert _plain(users, "alice", PASSWORD) is None
    right = work.take()
    assert _plain(users, "alice", "a-wrong-password") is not None
    wrong = work.take()
    assert _plain(users, "mallory", "a-wrong-password") is not None
    unknown = work.take()
    # PBKDF2 with 4096 iterations for both mechanisms, whoever it is, whatever the outcome
    assert wrong[("pbkdf2", "sha256", 4096)] == wrong[("pbkdf2", "sha512", 4096)] == 1
    assert wrong == unknown == right


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_does_the_same_work_for_an_unknown_user_as_for_a_wrong_password(
    users: LocalUsers, monkeypatch: pytest.MonkeyPatch, mechanism: str
) -> None:
    assert _scram(users, mechanism, "alice", PASSWORD) is None  # the right password logs in
    work = _Work(monkeypatch)
    assert _scram(users, mechanism, "alice", "a-wrong-password") is not None
    wrong = work.take()
    assert _scram(users, mechanism, "mallory", "a-wrong-password") is not None
    unknown = work.take()
    # the same hashes and HMACs (the made-up credential is derived for a real user too)
    assert wrong and wrong == unknown
