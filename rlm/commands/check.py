"""``rlm check --config FILE [--json]``: run the daemon's start-up preflight and print what was checked.

Checks, in order: log dirs exist and are readable, the node id, the storage plugin loads and the
store answers a read and accepts (then deletes) a tiny probe segment, the Kafka cluster answers,
the metadata store is usable (the topic exists with the configured partitions or can be created;
the file store's directory is writable), and what the read faces expose (TLS, SASL; a face bound
beyond loopback with neither fails unless ``--allow-plaintext``). Nothing is written to the
metadata store. Each step is bounded by ``storage_request_timeout_ms`` / ``metadata_request_timeout_ms``.

Exit status: 0 when every check passed, 1 when one failed, 3 for an invalid configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from rlm.config import load_config


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


def check(args: argparse.Namespace) -> int:
    from rlm.daemon.preflight import Preflight
    from rlm.logging_setup import configure_logging

    config = load_config(args.config)
    configure_logging(config.log_format, "critical")  # the printed lines say it all
    preflight = Preflight(config)
    checks = preflight.run()
    from rlm.commands.security_check import security_checks

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
