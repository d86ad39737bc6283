"""ApiVersions and Metadata: what the endpoint speaks and which partitions it leads (all of them).

Every tiered partition is led by this endpoint with a leader epoch that only changes when the
remote lineage does (its latest epoch); when it does, clients validate their position with
OffsetForLeaderEpoch, answered from the lineage (:mod:`fetcher.kafka.api_epochs`).
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from fetcher.kafka.codec import API_VERSIONS_KEY, SUPPORTED, make, nested, response_class
from fetcher.kafka.context import EndpointContext, TopicEntry

ZERO = datetime.timedelta(0)
_NO_AUTH_OPS = -(2**31)


def api_versions_response(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    """The ApiVersions response (also the KIP-511 v0 answer to an unsupported version)."""
    cls = response_class(API_VERSIONS_KEY, version)
    av = nested(cls, "ApiVersion")
    if error is ErrorCode.unsupported_version:
        lo, hi = SUPPORTED[API_VERSIONS_KEY]
        keys = (make(av, api_key=API_VERSIONS_KEY, min_version=lo, max_version=hi),)
    else:
        keys = tuple(
            make(av, api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(SUPPORTED.items())
        )
    return make(cls, error_code=error, api_keys=keys, throttle_time=ZERO)


async def handle_api_versions(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    return api_versions_response(version)


async def handle_metadata(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(3, version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    topic_cls = nested(cls, "MetadataResponseTopic")
    part_cls = nested(cls, "MetadataResponsePartition")
    catalog = await ctx.topics()
    node = ctx.settings.node_id
    wanted: list[tuple[str | None, Any]]
    if req.topics is None:
        wanted = [(name, None) for name in sorted(catalog.by_name)]
    else:
        wanted = [(getattr(t, "name", None), getattr(t, "topic_id", None)) for t in req.topics]
    epochs = await ctx.call(
        lambda: {
            e.name: [ctx.fetcher.latest_epoch(tp) for tp in e.partitions]
            for e in _entries(catalog.by_name, wanted)
        }
    )
    topics = []
    for name, tid in wanted:
        entry = catalog.by_name.get(name) if name else catalog.by_id.get(tid) if tid else None
        if entry is None:
            code = (
                ErrorCode.unknown_topic_id
                if name is None and tid is not None
                else ErrorCode.unknown_topic_or_partition
            )
            topics.append(
                make(
                    topic_cls,
                    error_code=code,
                    name=name,
                    topic_id=tid,
                    is_internal=False,
                    partitions=(),
                    topic_authorized_operations=_NO_AUTH_OPS,
                )
            )
            continue
        parts = tuple(
            make(
                part_cls,
                error_code=ErrorCode.none,
                partition_index=tp.partition,
                leader_id=node,
                leader_epoch=max(epoch, 0),
                replica_nodes=(node,),
                isr_nodes=(node,),
                offline_replicas=(),
            )
            for tp, epoch in zip(entry.partitions, epochs[entry.name], strict=True)
        )
        topics.append(
            make(
                topic_cls,
                error_code=ErrorCode.none,
                name=entry.name,
                topic_id=entry.topic_id,
                is_internal=False,
                partitions=parts,
                topic_authorized_operations=_NO_AUTH_OPS,
            )
        )
    brokers = (make(broker_cls, node_id=node, host=ctx.advertised_host, port=ctx.advertised_port, rack=None),)
    return make(
        cls,
        throttle_time=ZERO,
        brokers=brokers,
        cluster_id=ctx.settings.cluster_id,
        controller_id=node,
        topics=tuple(topics),
        cluster_authorized_operations=_NO_AUTH_OPS,
    )


def _entries(by_name: dict[str, TopicEntry], wanted: list[tuple[str | None, Any]]) -> list[TopicEntry]:
    by_id = {e.topic_id: e for e in by_name.values()}
    out = []
    for name, tid in wanted:
        e = by_name.get(name) if name else by_id.get(tid) if tid else None
        if e is not None:
            out.append(e)
    return out
