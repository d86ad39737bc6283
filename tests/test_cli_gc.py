"""The ``rlm`` process's own GC handling (issue 39: a cold command is mostly start-up).

As the process's entry point, ``rlm.cli.main()`` pauses the cyclic GC while the command's module
loads, runs the command with it on, and freezes it before the interpreter exits (its final
collections would walk every object the imports made). Called in-process with arguments (tests,
scripts), it leaves the caller's GC as it found it.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from rlm.cli import main
from rlm.exit_codes import ExitCode

# The process's entry: the command (here a stand-in for `offsets`) reports what it runs under
ENTRY = """
import gc, sys
import rlm.commands.offsets as offsets

def command(args):
    print("command: enabled", gc.isenabled(), "frozen", gc.get_freeze_count() > 0)
    return 0

offsets.offsets = command
from rlm.cli import main
sys.argv = ["rlm", "offsets", "--config", "unused.yaml", "--topic", "t", "--timestamp", "1"]
rc = main()
print("after: enabled", gc.isenabled(), "frozen", gc.get_freeze_count() > 0)
sys.exit(rc)
"""


def test_the_process_entry_runs_its_command_with_the_gc_on_and_freezes_it_for_the_exit() -> None:
    res = subprocess.run([sys.executable, "-c", ENTRY], capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["command: enabled True frozen False",
                                       "after: enabled True frozen True"]


def test_main_called_in_process_leaves_the_gc_alone(tmp_path: Path) -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    code = main(["offsets", "--config", str(tmp_path / "missing.yaml"), "--topic", "t", "--timestamp", "1"])
    assert code == ExitCode.CONFIG  # the command ran (and refused the missing file)
    assert gc.isenabled() and gc.get_freeze_count() == frozen
