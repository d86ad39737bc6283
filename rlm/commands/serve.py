"""``rlm serve --config FILE``: serve the read HTTP API over tiered data (no tiering).

Reads the same configuration as ``rlm run`` (only its storage, metadata and ``read`` sections
matter) and serves ``read.http_host:read.http_port`` (127.0.0.1:9465 by default) until SIGTERM or
SIGINT; running responses get a few seconds to finish. See docs/http-api.md for the endpoints.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rlm.config import DaemonConfig, load_config
from rlm.errors import PluginLoadError

if TYPE_CHECKING:
    from fetcher.http.server import HttpApiServer


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("serve", help="serve the read HTTP API (records, offsets, segments)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", "-c", type=Path, help="YAML or TOML configuration file (RLM_* env overrides)")
    p.add_argument("--host", help="bind address (overrides read.http_host)")
    p.add_argument("--port", type=int, help="port (overrides read.http_port; 0 = any free port)")
    p.add_argument("--kafka-listener", metavar="HOST:PORT",
                   help="also serve the Kafka-protocol endpoint here (same read core; see "
                   "docs/kafka-endpoint.md)")
    p.set_defaults(func=serve)


def read_api_server(config: DaemonConfig) -> HttpApiServer:
    """The HTTP API server for ``config`` (not started); says which extra to install if missing."""
    try:
        from fetcher.http.server import HttpApiServer
    except ImportError as e:
        raise PluginLoadError(f"the read HTTP API needs the 'http' extra "
                              f"(pip install 'kafka-rlm-sidecar[http]'): {e}") from e
    return HttpApiServer.from_config(config)


def serve(args: argparse.Namespace) -> int:
    from rlm.daemon.logging_setup import configure_logging

    config = load_config(args.config)
    updates = {k: v for k, v in (("http_host", args.host), ("http_port", args.port)) if v is not None}
    if updates:
        config = config.model_copy(update={"read": config.read.model_copy(update=updates)})
    configure_logging(config.log_format, config.log_level)
    server = read_api_server(config)
    listener = None
    if args.kafka_listener:
        from rlm.commands.kafka_serve import parse_listener, start_kafka_listener

        try:
            host, port = parse_listener(args.kafka_listener)
            listener = start_kafka_listener(server.fetcher, host, port)
        except BaseException:
            server.stop()  # never started: this only closes its fetcher
            raise
        print(f"kafka endpoint listening on {listener.bootstrap}", flush=True)
        import signal

        signal.signal(signal.SIGHUP, lambda signum, frame: listener.reload_tls() if listener else None)
    # shutdown order: HTTP, then the Kafka listener (its in-flight requests answered), then the
    # fetcher both read through
    server.serve(on_stop=listener.close if listener is not None else None)
    return 0
