"""Exit statuses of the ``rlm`` command, one meaning each, so that scripts, systemd and Kubernetes
can tell a typo from an outage.

This module is the one table: ``rlm --help`` and every subcommand's ``--help`` print
:data:`EPILOG`, generated from :data:`MEANINGS`; :mod:`rlm.cli` maps each error kind to its
status here; docs/operations.md lists the same lines (a test compares them).

Ground floor: constants only, used by :mod:`rlm.cli` and the commands.
"""

from __future__ import annotations

import enum
import signal


class ExitCode(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    CONFIG = 3
    ALREADY_RUNNING = 4
    UNPROTECTED = 5
    INTERRUPTED = 128 + signal.SIGINT
    TERMINATED = 128 + signal.SIGTERM


#: status -> what it means, as ``--help`` prints it (keep each line short: it is a table)
MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success; `rlm run` stopped cleanly after a first SIGTERM/SIGINT",
    ExitCode.FAILURE: "runtime failure (a --once task failed, corrupt or unreachable file or store, "
                      "an offset outside the stored range, an unusable work dir or full disk)",
    ExitCode.USAGE: "usage error (bad command line)",
    ExitCode.CONFIG: "configuration error (invalid config, plugin not loadable, failed preflight)",
    ExitCode.ALREADY_RUNNING: "another `rlm run` already holds this work dir or a log dir (lock)",
    ExitCode.UNPROTECTED: "`rlm status`: a partition to be tiered is unprotected (refused, or copy failing)",
    ExitCode.INTERRUPTED: "forced stop by a second SIGINT (Ctrl-C)",
    ExitCode.TERMINATED: "forced stop by a second SIGTERM",
}

#: the status of a read outside the stored range (``rlm fetch``/``offsets``/``replay``): a runtime
#: failure, not a usage error (2 is argparse's, for a malformed command line)
OFFSET_OUT_OF_RANGE = ExitCode.FAILURE
#: the status when the work dir or a cache cannot be written (read-only, not a directory, full disk)
ENVIRONMENT = ExitCode.FAILURE


def for_signal(signum: int) -> ExitCode:
    """The status of a stop forced by ``signum`` (the shell's 128 + signal number)."""
    return ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED


def epilog() -> str:
    """The ``exit status:`` section of every ``--help``, from :data:`MEANINGS`."""
    return "exit status:\n" + "\n".join(f"  {int(code):<4} {text}" for code, text in MEANINGS.items())


EPILOG = epilog()
