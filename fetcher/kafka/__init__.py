"""The Kafka-protocol face of the read core: a read-only endpoint Kafka's own clients consume from.

Any Kafka client reads tiered history by pointing ``bootstrap.servers`` here. Frames are
encoded and decoded with kio (generated from Kafka's message JSON); every read goes through
:class:`fetcher.RemoteFetcher`. Modules: :mod:`.server` (connections, framing, limits),
:mod:`.codec`, one ``api_*`` module per API family, :mod:`.groups` and :mod:`.offset_store`
(coordinator state), :mod:`.runner` (a listener on its own thread).
"""

from fetcher.kafka.context import ListenerSettings
from fetcher.kafka.runner import EndpointThread
from fetcher.kafka.server import KafkaEndpoint

__all__ = ["EndpointThread", "KafkaEndpoint", "ListenerSettings"]
