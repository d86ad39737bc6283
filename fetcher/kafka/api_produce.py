"""Produce: advertised, always refused. The endpoint is read-only.

librdkafka enables its MsgVer2 feature (and with it any Fetch version >= 4) only when the broker
advertises Produce >= 3 as well as Fetch >= 4, so the endpoint advertises Produce 3..9 and answers
every partition with UNSUPPORTED_VERSION, the code Kafka's ``getErrorResponse`` gives for a
request it does not support (not retriable: a producer fails at once instead of retrying).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fetcher.kafka.api_meta import ZERO
from fetcher.kafka.codec import make, nested, response_class

MESSAGE = "the remote-tier endpoint is read-only"


async def handle_produce(ctx: Any, req: Any, version: int, header: Any) -> Any:
    cls = response_class(0, version)
    tcls, pcls = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    topics = tuple(
        make(
            tcls,
            name=t.name,
            partition_responses=tuple(
                make(
                    pcls,
                    index=p.index,
                    error_code=ErrorCode.unsupported_version,
                    base_offset=-1,
                    log_append_time=None,
                    log_start_offset=-1,
                    record_errors=(),
                    error_message=MESSAGE,
                )
                for p in t.partition_data
            ),
        )
        for t in req.topic_data
    )
    return make(cls, responses=topics, throttle_time=ZERO)
