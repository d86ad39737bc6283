"""``rlm check --config FILE [--json]``: run the daemon's start-up preflight and print what was checked.

Checks, in order: the work dir is a writable directory, log dirs exist and are readable, the
node id, the storage plugin loads and the store answers a read and accepts (then deletes) a tiny
probe segment (a missing bucket names the command that creates it), the Kafka cluster answers,
the metadata store is usable (the topic exists with the configured partitions and is not
compacted, or the very CreateTopics the daemon would send, replication factor and configs
included, is accepted validate-only; the file store's directory is writable), the HTTP ports
``rlm run`` listens on can be bound, and what the read faces expose (TLS, SASL; a face bound
beyond loopback with neither fails unless ``--allow-plaintext``). Nothing is written to the
metadata store. Each step is bounded by ``storage_request_timeout_ms`` / ``metadata_request_timeout_ms``.
Every way ``rlm run`` refuses to start from a configuration is reported here first.

Exit status: 0 when every check passed, 1 when one failed, 3 for an invalid configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from rlm.config import DaemonConfig, load_config

if TYPE_CHECKING:
    from rlm.daemon.preflight import Check


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "check",
        help="check the configuration and every dependency (the daemon's preflight)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", type=Path, required=True, help="the daemon's configuration file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--allow-plaintext", action="store_true",
                   help="accept a read face bound beyond loopback with neither TLS nor SASL")
    p.set_defaults(func=check)


def listen_checks(config: DaemonConfig) -> list[Check]:
    """The ports ``rlm run`` binds (metrics/health; the read API with ``read.serve_http``): taken
    by another process, the daemon would refuse to start. Port 0 (any free port) is not checked."""
    from rlm.daemon.preflight import Check
    from rlm.daemon.probes import listen_check
    from rlm.environment import describe_os_error

    out = []
    faces = [("http", "http.host/http.port", config.http.host, config.http.port, config.http.enabled),
             ("read http", "read.http_host/http_port", config.read.http_host, config.read.http_port,
              config.read.serve_http)]
    for name, setting, host, port, used in faces:
        if not used or port == 0:
            continue
        try:
            out.append(Check(name, setting, True, listen_check(host, port)))
        except OSError as e:
            out.append(Check(name, setting, False, f"cannot listen on {host}:{port}: {describe_os_error(e)}"))
    return out


def check(args: argparse.Namespace) -> int:
    from rlm.daemon.preflight import Preflight
    from rlm.logging_setup import configure_logging

    config = load_config(args.config)
    configure_logging(config.log_format, "critical")  # the printed lines say it all
    preflight = Preflight(config)
    checks = preflight.run()
    from rlm.commands.security_check import security_checks

    checks += listen_checks(config)
    checks += security_checks(config, args.allow_plaintext)
    if preflight.rsm is not None:
        preflight.rsm.close()
    failed = [c for c in checks if not c.ok]
    if args.json:
        json.dump({"ok": not failed, "checks": [asdict(c) for c in checks]}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(f"rlm check {config.source}")
        for c in checks:
            print(c.line())
        print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
