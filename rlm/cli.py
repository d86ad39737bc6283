"""The ``rlm`` command line: one entry point, subcommands contributed by ``rlm.commands.*``.

Each command module exposes ``register(subparsers)`` that adds its parser and sets
``func`` to a callable taking the parsed namespace and returning an exit status. Errors
from this project (:class:`rlm.errors.RlmError`) are printed as one ``rlm: error: ...`` line,
never as a traceback, with the status of their kind (:class:`rlm.exit_codes.ExitCode`): 3 for
configuration, plugin-loading and preflight errors, 1 for the rest; 2 is left to argparse's usage errors.
A file-system problem (read-only or missing work dir, a file where a directory belongs, a full
disk) is one line too, naming the path and the fix (:mod:`rlm.environment`). Every subcommand's
``--help`` ends with the exit-status table of :mod:`rlm.exit_codes`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from rlm.errors import ConfigError, InstanceLockedError, PluginLoadError, PreflightError, RlmError
from rlm.exit_codes import EPILOG, ExitCode

#: command name -> the module that registers it (in ``--help`` order)
COMMANDS = {
    "dump": "rlm.commands.dump",
    "metadata": "rlm.commands.metadata",
    "run": "rlm.commands.run",
    "status": "rlm.commands.status",
    "demo": "rlm.commands.demo",
    "serve": "rlm.commands.serve",
    "check": "rlm.commands.check",
    "fetch": "rlm.commands.fetch",
    "offsets": "rlm.commands.offsets",
    "replay": "rlm.commands.replay",
    "kafka-serve": "rlm.commands.kafka_serve",
    "backfill": "rlm.commands.backfill",
    "iceberg": "rlm.commands.iceberg",
    "verify": "rlm.commands.verify",
    "restore": "rlm.commands.restore",
}
COMMAND_MODULES = tuple(COMMANDS.values())
DISTRIBUTION = "kafka-rlm-sidecar"


def version() -> str:
    """The installed distribution's version (``unknown`` when run from a source tree without install)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given the arguments, only the command they name is imported.

    A command module imports what its command needs (the log decoders, the daemon, Arrow,
    PyIceberg...); importing every one costs seconds per process, and sidecars, probes and
    scripts start ``rlm`` often. ``--help`` and an unknown command still see them all.
    """
    parser = argparse.ArgumentParser(
        prog="rlm",
        description="Tiered storage sidecar for Apache Kafka (KIP-405).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rlm {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    first = next((a for a in argv or () if not a.startswith("-")), None)
    modules = (COMMANDS[first],) if first in COMMANDS else COMMAND_MODULES
    for name in modules:
        if importlib.util.find_spec(name) is None:
            continue
        importlib.import_module(name).register(sub)
    for command in sub.choices.values():  # one exit-status table, in every subcommand's --help
        command.epilog = EPILOG
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (default: this process's own command line, ``sys.argv``)."""
    if argv is not None:  # called in-process (tests, scripts): the caller's interpreter is left alone
        return _run(list(argv))
    # The process's own command. A cold command is mostly start-up, and CPython's cyclic GC walks
    # the objects the imports create (classes, pydantic schemas), which live until exit anyway,
    # again at each collection: paused while the command's module loads, and frozen before the
    # interpreter's final collections walk them all once more (0.25-0.5 s of a cold `rlm offsets`
    # on a busy 2-core box; docs/performance.md). The command has closed what it opened by then.
    gc.disable()
    try:
        return _run(sys.argv[1:], entry=True)
    finally:
        gc.freeze()


def _run(argv: list[str], *, entry: bool = False) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if entry:
        gc.enable()  # the command itself (a daemon, a long scan) collects as always
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return ExitCode.USAGE
    try:
        return int(func(args))
    except (ConfigError, PluginLoadError, PreflightError) as e:
        print(f"rlm: error: {e}", file=sys.stderr)
        return ExitCode.CONFIG
    except InstanceLockedError as e:
        print(f"rlm: error: {e}", file=sys.stderr)
        return ExitCode.ALREADY_RUNNING
    except RlmError as e:
        print(f"rlm: error: {e}", file=sys.stderr)
        return ExitCode.FAILURE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK
    except OSError as e:  # the environment (work dir, cache, disk), not a bug: no traceback
        from rlm.environment import describe_os_error
        from rlm.exit_codes import ENVIRONMENT

        print(f"rlm: error: {describe_os_error(e)}", file=sys.stderr)
        return ENVIRONMENT


if __name__ == "__main__":
    sys.exit(main())
