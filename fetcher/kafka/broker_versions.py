"""Which version of each request merged mode's forwarder sends a broker: the highest both know.

The forwarder is a Kafka client of its own (kio frames), so it does what Kafka's clients do on
every new connection: ApiVersions first, then each request at the highest version the broker and
the forwarder both support. A fixed version does not fit every broker the sidecar runs beside:
Kafka 2.8 answers Metadata up to v11 and ListOffsets up to v6 and closes the connection on a
newer one (the issue's merged mode on 2.8 never reached the broker), while Kafka 4.0 removed the
oldest versions (KIP-896). Fetch stops at v12 on purpose: v13 names topics by id, which the
forwarder would have to learn first, and brokers keep v12 (Kafka 4 answers Fetch v4 and up).

A broker that supports no version the forwarder can build is a :class:`BrokerVersionError`
naming the request and both ranges, in one line.
"""

from __future__ import annotations

from typing import Any

from kio.index import load_request_schema
from kio.schema.api_versions.v3 import request as av_req
from kio.schema.errors import ErrorCode

from fetcher.kafka.codec import make
from rlm.errors import DependencyUnavailableError

FETCH, LIST_OFFSETS, METADATA, OFFSET_FOR_LEADER_EPOCH = 1, 2, 3, 23

#: api key -> (name, lowest, highest version the forwarder builds); the builders fill the fields
#: each version has (``codec.make`` drops the others), so every version in the range is complete
FORWARDER: dict[int, tuple[str, int, int]] = {
    FETCH: ("Fetch", 5, 12),  # 5: the log start offset in answers; 13+: topic ids
    LIST_OFFSETS: ("ListOffsets", 2, 7),  # 2: isolation level
    METADATA: ("Metadata", 4, 12),  # 4: allow_auto_topic_creation (false)
    OFFSET_FOR_LEADER_EPOCH: ("OffsetForLeaderEpoch", 2, 4),  # kio's oldest is 2
}

Ranges = dict[int, tuple[int, int]]


class BrokerVersionError(DependencyUnavailableError):
    """The broker answers no version of a request that the forwarder can send (or no ApiVersions):
    retrying the same broker cannot help."""

    retriable = False


def api_versions_request() -> Any:
    """ApiVersions v3 (every broker since Kafka 2.4 answers it); the software name and version
    only label the connection in the broker's metrics."""
    return make(
        av_req.ApiVersionsRequest, client_software_name="rlm-kafka-endpoint", client_software_version="1"
    )


def ranges_of(resp: Any, broker: str) -> Ranges:
    """The broker's (min, max) version per API key, from its ApiVersions answer."""
    if resp.error_code is not ErrorCode.none:
        raise BrokerVersionError(f"broker {broker} refused ApiVersions v3: {resp.error_code.name}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


def request_class(ranges: Ranges, api_key: int, broker: str) -> type[Any]:
    """kio's request class of the highest version of ``api_key`` both sides support."""
    name, lo, hi = FORWARDER[api_key]
    theirs = ranges.get(api_key)
    if theirs is None or max(lo, theirs[0]) > min(hi, theirs[1]):
        answered = "none" if theirs is None else f"v{theirs[0]}-v{theirs[1]}"
        raise BrokerVersionError(
            f"broker {broker} answers {name} {answered}; the Kafka endpoint's merged mode sends "
            f"{name} v{lo}-v{hi}"
        )
    cls: type[Any] = load_request_schema(api_key, min(hi, theirs[1]))
    return cls
