"""The ``rlm`` command line: one entry point, subcommands contributed by ``rlm.commands.*``.

Each command module exposes ``register(subparsers)`` that adds its parser and sets
``func`` to a callable taking the parsed namespace and returning an exit status. Errors
from this project (:class:`rlm.errors.RlmError`) are printed as one ``rlm: error: ...`` line
with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from rlm.errors import RlmError

COMMAND_MODULES = (
    "rlm.commands.dump",
    "rlm.commands.metadata",
    "rlm.commands.run",
    "rlm.commands.status",
    "rlm.commands.demo",
    "rlm.commands.backfill",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlm", description="Tiered storage sidecar for Apache Kafka (KIP-405)."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        if importlib.util.find_spec(name) is None:
            continue
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args))
    except RlmError as e:
        print(f"rlm: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
