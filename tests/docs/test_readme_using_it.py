"""The README's "Using it" synopsis names real commands and options (issue 39, item 6).

The synopsis is not runnable as written (``[--once]``, ``T``, ``PATH...`` are placeholders), so the
page marks it ``not-run``; the same commands run against real services in docs/operations.md's
walkthrough (tests/docs/test_operations_walkthrough.py). What can still go stale here is checked:
every line's command path and every option it shows exist in ``rlm``'s parser, and every ``rlm``
command has a line.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rlm.cli import COMMANDS, build_parser
from tests.docs.shell_blocks import ShellBlock, shell_blocks

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SECTION = "Using it"


def _synopsis() -> list[ShellBlock]:
    return shell_blocks(README, SECTION)


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    return None


def _resolve(line: str) -> tuple[list[str], argparse.ArgumentParser]:
    """The command path a synopsis line names (``['metadata', 'dump']``) and its parser."""
    words = line.split("#", 1)[0].split()
    assert words[0] == "rlm", line
    parser = build_parser(words[1:])
    path: list[str] = []
    for w in words[1:]:
        sub = _subcommand(parser, w) if re.fullmatch(r"[a-z][a-z-]*", w) else None
        if sub is None:
            break
        path.append(w)
        parser = sub
    return path, parser


def test_using_it_blocks_are_marked() -> None:
    blocks = _synopsis()
    assert blocks, f"README.md has no shell block under {SECTION!r}"
    unmarked = [b.where for b in blocks if b.not_run is None]
    assert not unmarked, (
        f"README.md {SECTION!r}: {unmarked}: a runnable command belongs in docs/operations.md's "
        "walkthrough (which CI runs); mark a synopsis <!-- not-run: why -->")


def test_every_synopsis_line_names_a_real_command_and_real_options() -> None:
    seen: set[str] = set()
    for block in _synopsis():
        for line in block.commands():
            path, parser = _resolve(line)
            assert path, f"{line!r}: no rlm command"
            seen.add(path[0])
            known = set(parser._option_string_actions)
            shown = re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", line.split("#", 1)[0])
            unknown = [o for o in shown if o not in known]
            assert not unknown, f"{line!r}: `rlm {' '.join(path)}` has no option {unknown}"
    assert seen == set(COMMANDS), f"commands missing from the README's synopsis: {set(COMMANDS) - seen}"
