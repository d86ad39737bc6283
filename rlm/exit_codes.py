"""Exit statuses of the ``rlm`` command, one meaning each (documented in docs/operations.md and
``rlm --help``), so that scripts, systemd and Kubernetes can tell a typo from an outage.

Ground floor: constants only, used by :mod:`rlm.cli` and the commands.
"""

from __future__ import annotations

import enum
import signal


class ExitCode(enum.IntEnum):
    OK = 0
    """Done: the command succeeded, or ``rlm run`` stopped cleanly after a first SIGTERM/SIGINT."""
    FAILURE = 1
    """Runtime failure: a task failed (``--once``), a file or store is corrupt or unreachable."""
    USAGE = 2
    """Bad command line (argparse's own status)."""
    CONFIG = 3
    """The configuration is invalid, a plugin cannot be found, imported or configured, or the
    start-up preflight failed (the message names the setting)."""
    ALREADY_RUNNING = 4
    """``rlm run``: another ``rlm run`` holds the work dir's or a log dir's lock (two sidecars on
    one node by mistake); the message names the path and the holder's pid. Nothing was written."""
    INTERRUPTED = 128 + signal.SIGINT
    """130: forced stop by a second SIGINT (or Ctrl-C in a one-shot command)."""
    TERMINATED = 128 + signal.SIGTERM
    """143: forced stop by a second SIGTERM."""


def for_signal(signum: int) -> ExitCode:
    """The status of a stop forced by ``signum`` (the shell's 128 + signal number)."""
    return ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED


EPILOG = """exit status:
  0    success; `rlm run` stopped cleanly after a first SIGTERM/SIGINT
  1    runtime failure (a --once task failed, corrupt or unreachable file or store)
  2    usage error (bad command line)
  3    configuration error (invalid config, plugin not loadable, failed preflight)
  4    another `rlm run` already holds this work dir or a log dir (lock)
  130  forced stop by a second SIGINT (Ctrl-C)
  143  forced stop by a second SIGTERM"""
