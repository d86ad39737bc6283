"""FindCoordinator, OffsetFetch, OffsetCommit: the endpoint coordinates its own groups.

librdkafka asks a coordinator even for ``assign``; pointing it at the real cluster would mix a
history reader's offsets into live groups, so the endpoint answers itself and keeps offsets in
:class:`~fetcher.kafka.offset_store.OffsetStore`. Transaction coordinators (key type 1) are
refused with COORDINATOR_NOT_AVAILABLE: the endpoint is read-only.

OffsetCommit is checked per partition as a broker checks it: a topic or partition the endpoint
does not serve answers UNKNOWN_TOPIC_OR_PARTITION, metadata longer than
``offset.metadata.max.bytes`` OFFSET_METADATA_TOO_LARGE; the others of the same request are
committed. Committed offsets expire (:class:`~fetcher.kafka.offset_store.OffsetRetention`).
"""

from __future__ import annotations

from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from fetcher.kafka.api_meta import ZERO
from fetcher.kafka.codec import make, nested, response_class
from fetcher.kafka.context import EndpointContext
from fetcher.kafka.offset_store import Committed

log = structlog.get_logger(__name__)

_JAVA_CHAR_BYTES = 2  # Kafka measures metadata as a Java String: UTF-16 code units


async def handle_find_coordinator(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(10, version)
    key_type = int(getattr(req, "key_type", 0))
    code = ErrorCode.none if key_type == 0 else ErrorCode.coordinator_not_available
    msg = None if code is ErrorCode.none else "the remote-tier endpoint coordinates consumer groups only"

    def where(key: str) -> tuple[int, str, int]:
        return ctx.coordinator_for(key) if code is ErrorCode.none else (-1, "", -1)

    if version >= 4:
        coord = nested(cls, "Coordinator")
        coords = []
        for k in req.coordinator_keys:
            node, host, port = where(k)
            coords.append(make(coord, key=k, node_id=node, host=host, port=port, error_code=code,
                               error_message=msg))
        return make(cls, throttle_time=ZERO, coordinators=tuple(coords))
    node, host, port = where(req.key)
    return make(
        cls, throttle_time=ZERO, error_code=code, error_message=msg, node_id=node, host=host, port=port
    )


async def handle_offset_fetch(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    """Committed offsets, read on the executor: the store's lock may be held by a commit that is
    writing and fsyncing its file, and the event loop serves every other connection meanwhile."""
    # a KIP-848 member's fetch carries its epoch (v9+), checked on the loop that owns the groups
    codes = {
        g.group_id: ctx.consumer_groups.validate_offset_request(
            g.group_id, getattr(g, "member_id", None), int(getattr(g, "member_epoch", -1)), commit=False)
        if ctx.owns_group(g.group_id) else ErrorCode.not_coordinator
        for g in (req.groups if version >= 8 else ())
    }
    return await ctx.call(lambda: _offset_fetch(ctx, req, version, codes))


def _offset_fetch(ctx: EndpointContext, req: Any, version: int, codes: dict[str, ErrorCode]) -> Any:
    cls = response_class(9, version)
    if version >= 8:
        gcls = nested(cls, "OffsetFetchResponseGroup")
        groups = tuple(
            make(
                gcls,
                group_id=g.group_id,
                error_code=codes[g.group_id],
                topics=_fetch_topics(
                    ctx,
                    cls,
                    g.group_id,
                    g.topics,
                    "OffsetFetchResponseTopics",
                    "OffsetFetchResponsePartitions",
                ) if codes[g.group_id] is ErrorCode.none else (),
            )
            for g in req.groups
        )
        return make(cls, throttle_time=ZERO, groups=groups)
    if not ctx.owns_group(req.group_id):
        return make(cls, throttle_time=ZERO, topics=(), error_code=ErrorCode.not_coordinator)
    topics = _fetch_topics(
        ctx, cls, req.group_id, req.topics, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition"
    )
    return make(cls, throttle_time=ZERO, topics=topics, error_code=ErrorCode.none)


def _fetch_topics(
    ctx: EndpointContext, cls: Any, group: str, topics: Any, tname: str, pname: str
) -> tuple[Any, ...]:
    tcls, pcls = nested(cls, tname), nested(cls, pname)
    if topics is None:  # all committed offsets of the group
        stored = ctx.offsets.topics(group)
        asked = [(t, sorted(ps)) for t, ps in sorted(stored.items())]
    else:
        asked = [(t.name, list(t.partition_indexes)) for t in topics]
    out = []
    for name, parts in asked:
        rows = []
        for p in parts:
            c = ctx.offsets.get(group, name, int(p))
            rows.append(
                make(
                    pcls,
                    partition_index=p,
                    committed_offset=c.offset if c else -1,
                    committed_leader_epoch=c.leader_epoch if c else -1,
                    metadata=c.metadata if c else "",
                    error_code=ErrorCode.none,
                )
            )
        out.append(make(tcls, name=name, partitions=tuple(rows)))
    return tuple(out)


async def handle_offset_commit(ctx: EndpointContext, req: Any, version: int, header: Any) -> Any:
    cls = response_class(8, version)
    tcls, pcls = nested(cls, "OffsetCommitResponseTopic"), nested(cls, "OffsetCommitResponsePartition")
    generation = int(getattr(req, "generation_id_or_member_epoch", getattr(req, "generation_id", -1)))
    if not ctx.owns_group(req.group_id):
        code = ErrorCode.not_coordinator
    elif ctx.consumer_groups.is_consumer_group(req.group_id):  # KIP-848: fenced by member epoch
        code = (ErrorCode.unsupported_version if version < 9 and req.member_id
                else ctx.consumer_groups.validate_offset_request(req.group_id, req.member_id, generation,
                                                                 commit=True))
    else:
        code = ctx.groups.commit_allowed(req.group_id, req.member_id, generation,
                                         getattr(req, "group_instance_id", None))
    codes: dict[tuple[str, int], ErrorCode] = {}
    if code is ErrorCode.none:
        ctx.groups.ensure_ticker()  # offsets expire even when no group request ever comes
        catalog = await ctx.topics()
        limit = ctx.settings.offset_metadata_max_bytes
        entries = []
        for t in req.topics:
            entry = catalog.by_name.get(str(t.name))
            for p in t.partitions:
                part = int(p.partition_index)
                why = _refusal(entry is not None and 0 <= part < len(entry.partitions), p.committed_metadata,
                               limit)
                codes[(str(t.name), part)] = why
                if why is ErrorCode.none:
                    entries.append((str(t.name), part, Committed(
                        int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                        p.committed_metadata)))
        refused = sorted({f"{t}-{p}:{c.name}" for (t, p), c in codes.items() if c is not ErrorCode.none})
        if refused:
            log.info("kafka_offset_commit_refused", group=req.group_id, partitions=refused[:20],
                     count=len(refused))
        if entries:
            await ctx.call(lambda: ctx.offsets.commit(req.group_id, entries))
    topics = tuple(
        make(
            tcls,
            name=t.name,
            partitions=tuple(
                make(pcls, partition_index=p.partition_index,
                     error_code=codes.get((str(t.name), int(p.partition_index)), code))
                for p in t.partitions
            ),
        )
        for t in req.topics
    )
    return make(cls, throttle_time=ZERO, topics=topics)


def _refusal(known: bool, metadata: str | None, limit: int) -> ErrorCode:
    """Why a broker would refuse to commit this partition's offset (``none``: it would not)."""
    if not known:
        return ErrorCode.unknown_topic_or_partition
    if metadata is not None and len(metadata.encode("utf-16-le")) // _JAVA_CHAR_BYTES > limit:
        return ErrorCode.offset_metadata_too_large
    return ErrorCode.none
