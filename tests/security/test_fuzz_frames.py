"""A fuzzer of request frames against the Kafka endpoint over real TLS sockets (hypothesis).

Frames: kio's valid requests for known API keys and versions (supported or not), raw headers
for unknown keys and versions, then bit flips, truncations, extensions and huge length fields
(2^31-1 and 2^32-1 written over any position: array, string and tagged-field lengths), with a
true or a lying size prefix; sent on a fresh connection before login, and after a successful
SASL login. For every example:

- the server answers each frame (its correlation id) or closes that connection, within
  :data:`BOUND_S` (JoinGroup and SyncGroup may wait for other members, as on a broker: for them
  only the next point);
- a second client, logged in once at the start on its own connection, is served ApiVersions and
  a Metadata listing its topics within :data:`BOUND_S`.

The endpoint is one of its own (same broker, same security settings as the suite's), so the
groups and offsets the fuzzer creates stay out of the other tests' way.

Found so far: a Metadata v12 frame whose topic array claims 2^32-2 elements (kio reserved 32 GiB
for it and Rust aborted the process: every client gone); fixed in ``fetcher/kafka/frame_bounds.py``.
"""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from fetcher.kafka import EndpointThread
from fetcher.kafka.codec import SUPPORTED, request_class
from fetcher.kafka.frame_bounds import FrameBoundsError, check_entity
from tests.security.conftest import PASSWORDS, Secured, own_endpoint
from tests.security.frames import api_versions, frame, metadata, plain_login, recv_exact, response, tls

pytestmark = [pytest.mark.security, pytest.mark.kafka]

BOUND_S = 20.0  # an answer or a close within this (a Fetch long-poll is at most 5 s)
MAY_WAIT = {11, 14}  # JoinGroup, SyncGroup: wait for the group's other members, as a broker does
SASL = {17: (0, 1), 36: (0, 2)}  # SaslHandshake, SaslAuthenticate: answered by the connection guard
KNOWN = {**SUPPORTED, **SASL}
UNSUPPORTED_KNOWN = (19, 20, 21, 22, 32, 37, 42, 50, 60)  # APIs kio knows and the endpoint does not serve
HUGE = (
    b"\x7f\xff\xff\xff",  # int32 2^31-1: a legacy array or bytes length
    b"\xff\xff\xff\xff",  # int32 -1 / uint32 max
    b"\xff\xff\xff\xff\x0f",  # uvarint 2^32-1: a compact array/string length or tagged-field count
    b"\xff\xff\xff\xff\x07",  # uvarint 2^31-1
    b"\x7f\xff",  # int16 32767: a legacy string length
)
FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,  # the server is the state: a replayed example proves nothing by itself
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # the suite's output check; the endpoint is per module
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

st.register_type_strategy(Records, st.one_of(st.none(), st.binary(max_size=64)))


@dataclass
class Target:
    secured: Secured
    endpoint: EndpointThread
    witness: socket.socket  # bob, logged in once: must be served after every example

    def connect(self) -> socket.socket:
        return tls(self.secured, port=self.endpoint.port)


@pytest.fixture(scope="module")
def target(secured: Secured) -> Iterator[Target]:
    with own_endpoint(secured, "fuzz") as own:
        endpoint = own.endpoint
        witness = tls(secured, port=endpoint.port)
        assert plain_login(witness, "bob", PASSWORDS["bob"]).error_code == ErrorCode.none
        t = Target(secured, endpoint, witness)
        assert_witness_served(t)
        yield t
        assert_witness_served(t)
        with t.connect() as fresh:  # and a new client still logs in
            assert plain_login(fresh, "bob", PASSWORDS["bob"]).error_code == ErrorCode.none
        witness.close()


def assert_witness_served(t: Target) -> None:
    s = t.witness
    s.settimeout(BOUND_S)
    s.sendall(frame(18, 3, 101, api_versions()))
    assert response(s, 18, 3).error_code == ErrorCode.none
    s.sendall(frame(3, 12, 102, metadata()))
    names = {tp.name for tp in response(s, 3, 12).topics}
    assert set(t.secured.topics.values()) <= names


# ---- frames -----------------------------------------------------------------------------------
@st.composite
def requests(draw: st.DrawFn, keys: tuple[int, ...]) -> tuple[bytes, int]:
    """One request without its size prefix, and where its body starts: kio's valid request where
    kio knows the key and version, else a version-1 header (key, version, correlation id, client
    id) and random bytes."""
    # weighted by repetition (hypothesis favours small integers, so no "integers(0, 9) == 0"):
    # mostly the phase's keys and their versions, some unsupported or unknown ones
    pick = draw(st.sampled_from(("phase",) * 8 + ("unsupported", "unknown")))
    key = draw(
        {"phase": st.sampled_from(keys), "unsupported": st.sampled_from(UNSUPPORTED_KNOWN)}.get(
            pick, st.integers(-1, 200)
        )
    )
    lo, hi = KNOWN.get(key, (0, 3))
    in_range = draw(st.sampled_from((True,) * 4 + (False,)))
    version = draw(st.integers(lo, hi) if in_range else st.integers(-1, hi + 3))
    corr = draw(st.integers(0, 2**31 - 1))
    cls = request_class(key, version)
    if cls is None:
        head = struct.pack(">hhih", key, version, corr, 4) + b"fuzz"
        return head + draw(st.binary(max_size=64)), len(head)
    data = frame(key, version, corr, draw(st.from_type(cls)))[4:]
    _, body_at = entity_reader(cls.__header_schema__)(data, 0)
    return data, body_at


@st.composite
def mutated(draw: st.DrawFn, keys: tuple[int, ...]) -> bytes:
    """A request with up to 3 mutations; a huge length lands on the body's first field half the
    time (many requests start with an array: Metadata's topics), else anywhere."""
    raw, body_at = draw(requests(keys))
    data = bytearray(raw)
    rnd = draw(st.randoms(use_true_random=False))  # uniform positions: hypothesis favours small ints
    for _ in range(rnd.choice((0, 1, 1, 2, 3))):
        kind = rnd.choice(("flip", "truncate", "extend", "huge", "huge"))
        at = body_at if rnd.random() < 0.5 else rnd.randrange(max(len(data), 1))
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << rnd.randrange(8)
        elif kind == "truncate":
            del data[max(at, rnd.randrange(max(len(data), 1))) :]
        elif kind == "extend":
            data += rnd.randbytes(rnd.randint(1, 32))
        else:
            token = rnd.choice(HUGE)
            data[at : at + len(token)] = token
    return bytes(data)


@st.composite
def sendings(draw: st.DrawFn, keys: tuple[int, ...]) -> list[tuple[bytes, bool]]:
    """1-3 frames (size prefix + request) sent back to back; True when the prefix is the truth.
    A lying prefix is one the server must refuse on sight (negative, below a header, over its
    limit); one promising bytes that never come is the soak's idle case, not a fuzz example."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        body = draw(mutated(keys))
        lie = draw(st.sampled_from((None,) * 40 + (-1, -(2**31), 0, 3, 7, 2**31 - 1)))
        out.append((struct.pack(">i", len(body) if lie is None else lie) + body, lie is None))
    return out


# ---- checks -----------------------------------------------------------------------------------
def _answered_or_closed(s: socket.socket, sent: list[tuple[bytes, bool]]) -> str:
    """Reads what the server sends for ``sent``: each true frame answered (its correlation id) in
    order, or the connection closed. Returns 'answered', 'closed' or 'waiting' (a MAY_WAIT
    request, left unanswered); fails on silence past BOUND_S."""
    s.settimeout(BOUND_S)
    for data, truthful in sent:
        if not truthful or len(data) < 12:  # the server closes (no header to answer) or waits: see below
            return _closed_within(s)
        key, corr = struct.unpack_from(">h", data, 4)[0], struct.unpack_from(">i", data, 8)[0]
        try:
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            body = recv_exact(s, size)
        except TimeoutError:
            if key in MAY_WAIT:
                return "waiting"
            raise AssertionError(f"no answer and no close in {BOUND_S} s for {data.hex()}") from None
        except (ConnectionError, ssl.SSLError, OSError):
            return "closed"
        assert struct.unpack_from(">i", body)[0] == corr, f"answer to another request for {data.hex()}"
    return "answered"


def _closed_within(s: socket.socket) -> str:
    try:
        while s.recv(65536):
            pass  # answers to earlier frames of the example, then the close
    except TimeoutError:
        raise AssertionError(f"a frame the server must refuse left the connection open {BOUND_S} s") from None
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    return "closed"


def _send(s: socket.socket, sent: list[tuple[bytes, bool]]) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):  # closed while we wrote: the read says
        s.sendall(b"".join(d for d, _ in sent))


def _one_example(t: Target, sent: list[tuple[bytes, bool]], login: bool) -> None:
    s = t.connect()
    try:
        if login:
            assert plain_login(s, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
        _send(s, sent)
        _answered_or_closed(s, sent)
    finally:
        s.close()
    assert_witness_served(t)


PRE_LOGIN_KEYS = (18, 17, 36)
ALL_KEYS = tuple(KNOWN)


@FUZZ
@given(sent=sendings(ALL_KEYS))
def test_fuzzed_frames_after_login(target: Target, sent: list[tuple[bytes, bool]]) -> None:
    _one_example(target, sent, login=True)


@FUZZ
@given(sent=sendings(PRE_LOGIN_KEYS))
def test_fuzzed_frames_before_login(target: Target, sent: list[tuple[bytes, bool]]) -> None:
    _one_example(target, sent, login=False)


# ---- the bound on array lengths (fetcher/kafka/frame_bounds.py), without a server -------------
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_length_walk_ends_where_kio_ends(data: st.DataObject) -> None:
    """For every request the endpoint parses, the bounds walk reads exactly what kio reads."""
    key = data.draw(st.sampled_from(sorted(KNOWN)))
    cls = load_request_schema(key, data.draw(st.integers(*KNOWN[key])))
    buf = io.BytesIO()
    entity_writer(cls)(buf, data.draw(st.from_type(cls)))
    _, n = entity_reader(cls)(buf.getvalue(), 0)
    assert check_entity(cls, buf.getvalue(), 0) == n == len(buf.getvalue())


@pytest.mark.parametrize(
    ("version", "length"),
    [(1, struct.pack(">i", 2**31 - 1)), (12, b"\xff\xff\xff\xff\x0f"), (12, b"\xff\xff\xff\xff\x07")],
)
def test_an_array_longer_than_the_frame_is_refused(version: int, length: bytes) -> None:
    """The fuzzer's first find: these frames made kio reserve 16-32 GiB and Rust abort the process."""
    cls = load_request_schema(3, version)
    with pytest.raises(FrameBoundsError, match="topics"):
        check_entity(cls, length + b"\x00", 0)


def test_a_null_for_an_array_that_cannot_be_null_is_refused() -> None:
    """The fuzzer's second find: DescribeGroups v2 with ``groups`` = null (body ``ff ff ff ff``)
    was read by kio as None and the handler failed with a traceback (UNKNOWN_SERVER_ERROR). Kafka's
    parser refuses it; a nullable array (Metadata's ``topics``) stays allowed."""
    with pytest.raises(FrameBoundsError, match="groups"):
        check_entity(load_request_schema(15, 2), b"\xff\xff\xff\xff", 0)
    metadata_all_topics = struct.pack(">i", -1) + b"\x00\x00\x00"  # topics null, then 3 booleans
    assert check_entity(load_request_schema(3, 8), metadata_all_topics, 0) == len(metadata_all_topics)
