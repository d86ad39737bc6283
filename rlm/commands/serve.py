"""``rlm serve --config FILE``: serve tiered data for reading (no tiering).

Reads the same configuration as ``rlm run`` (only its storage, metadata and ``read`` sections
matter) and serves, until SIGTERM or SIGINT, what this install can: the read HTTP API on
``read.http_host:read.http_port`` (127.0.0.1:9465 by default; needs the ``http`` extra) and, with
``--kafka-listener``, the Kafka-protocol endpoint (needs the ``kafka`` extra). A face whose extra
is missing is left out with one line on stderr naming the extra; only when nothing asked for can
start does the command fail (exit 3, like a configuration error). A face bound beyond loopback
with neither TLS nor authentication is refused (exit 3) unless --allow-plaintext or
read.allow_plaintext says another boundary protects it. Running responses get a few seconds to
finish. See docs/http-api.md, docs/kafka-endpoint.md and docs/security.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rlm.config import DaemonConfig, load_config
from rlm.errors import PluginLoadError

if TYPE_CHECKING:
    from fetcher.http.server import HttpApiServer


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("serve", help="serve tiered data: read HTTP API (+ Kafka-protocol endpoint)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", "-c", type=Path, help="YAML or TOML configuration file (RLM_* env overrides)")
    p.add_argument("--host", help="bind address (overrides read.http_host)")
    p.add_argument("--port", type=int, help="port (overrides read.http_port; 0 = any free port)")
    p.add_argument("--kafka-listener", metavar="HOST:PORT",
                   help="also serve the Kafka-protocol endpoint here (same read core; see "
                   "docs/kafka-endpoint.md)")
    p.add_argument("--allow-plaintext", action="store_true",
                   help="serve beyond loopback with neither TLS nor authentication (also "
                   "read.allow_plaintext); refused otherwise, see docs/security.md")
    p.set_defaults(func=serve)


def http_extra_missing() -> str | None:
    """Why the read HTTP API cannot start in this install (the ``http`` extra), or ``None``."""
    try:
        import fetcher.http.server  # noqa: F401
    except ImportError as e:
        return f"the read HTTP API needs the 'http' extra (pip install 'kafka-rlm-sidecar[http]'): {e}"
    return None


def read_api_server(config: DaemonConfig) -> HttpApiServer:
    """The HTTP API server for ``config`` (not started); says which extra to install if missing."""
    missing = http_extra_missing()
    if missing is not None:
        raise PluginLoadError(missing)
    from fetcher.http.server import HttpApiServer

    return HttpApiServer.from_config(config)


def _skipped(why: str) -> None:
    print(f"rlm serve: not started: {why}", file=sys.stderr, flush=True)


def serve(args: argparse.Namespace) -> int:
    from rlm.commands.kafka_serve import kafka_extra_missing, parse_listener
    from rlm.commands.serve_plaintext import http_face, kafka_face, refuse_plaintext
    from rlm.logging_setup import configure_logging

    config = load_config(args.config)
    updates = {k: v for k, v in (("http_host", args.host), ("http_port", args.port)) if v is not None}
    if updates:
        config = config.model_copy(update={"read": config.read.model_copy(update=updates)})
    configure_logging(config.log_format, config.log_level)
    kafka_at = parse_listener(args.kafka_listener) if args.kafka_listener else None
    no_http = http_extra_missing()
    no_kafka = kafka_extra_missing() if kafka_at is not None else None
    if no_http is not None and (kafka_at is None or no_kafka is not None):
        raise PluginLoadError("; ".join(w for w in (no_http, no_kafka) if w is not None))
    faces = [http_face(config)] if no_http is None else []
    if kafka_at is not None and no_kafka is None:
        faces.append(kafka_face(config, kafka_at[0]))
    refuse_plaintext(config, faces, args.allow_plaintext)  # before anything is opened
    if no_kafka is not None:
        _skipped(no_kafka)
    if no_http is not None:
        from rlm.commands.kafka_serve import serve_kafka_until_signal

        _skipped(no_http)
        assert kafka_at is not None
        return serve_kafka_until_signal(config, *kafka_at)
    return _serve_http(config, kafka_at if no_kafka is None else None)


def _serve_http(config: DaemonConfig, kafka_at: tuple[str, int] | None) -> int:
    """The HTTP API, with the Kafka listener beside it on the same fetcher when ``kafka_at``."""
    from fetcher.allocator import tune_allocator
    from rlm.commands.kafka_serve import start_kafka_listener

    tune_allocator(config.read.allocator_mmap_threshold_bytes, config.read.allocator_trim_threshold_bytes)

    server = read_api_server(config)
    listener = None
    if kafka_at is not None:
        try:
            listener = start_kafka_listener(server.fetcher, *kafka_at)
        except BaseException:
            server.stop()  # never started: this only closes its fetcher
            raise
        print(f"kafka endpoint listening on {listener.bootstrap}", flush=True)
        import signal

        signal.signal(signal.SIGHUP, lambda signum, frame: listener.reload_tls() if listener else None)
    # shutdown order: HTTP, then the Kafka listener (its in-flight requests answered), then the
    # fetcher both read through
    server.announce(lambda url: print(f"http API listening on {url} (index: /)", flush=True))
    server.serve(on_stop=listener.close if listener is not None else None)
    return 0
