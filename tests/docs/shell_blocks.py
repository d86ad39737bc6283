"""The fenced shell blocks of a Markdown page, and which of them the page says not to run.

Why a module of its own: the docs are tests (issue 39, item 6). A shell block in a page the tests
cover either runs, as written, against real services, or is marked in the page itself, on the
line right before its fence, with why it does not::

    <!-- not-run: the embedded demo, run by tests/daemon/test_demo.py -->
    ```sh
    rlm demo
    ```

so a reader sees which commands CI ran, and a block added without a mark is run (and fails the
test if it does not work) rather than silently skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: fence languages that mean "type this in a shell"
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console", "zsh"})

_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")


class DocBlockError(ValueError):
    """A page's blocks cannot be told apart (an unclosed fence, a mark with no reason or no block)."""


@dataclass(frozen=True)
class ShellBlock:
    """One fenced shell block: where it is, what it says, and the page's reason not to run it."""

    path: Path
    line: int  # 1-based line of the opening fence
    section: str  # the heading it sits under ("" before the first heading)
    text: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    def commands(self) -> list[str]:
        """The block's command lines (comments and blank lines left out; a heredoc counts once)."""
        out: list[str] = []
        heredoc_end: str | None = None
        for raw in self.text.splitlines():
            line = raw.strip()
            if heredoc_end is not None:
                if line == heredoc_end:
                    heredoc_end = None
                continue
            if not line or line.startswith("#"):
                continue
            out.append(line)
            m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
            if m:
                heredoc_end = m.group(1)
        return out


def shell_blocks(path: Path, section: str | None = None) -> list[ShellBlock]:
    """The shell blocks of ``path`` in page order; only those under heading ``section`` (and its
    subheadings) when given. Raises :class:`DocBlockError` for an unclosed fence, a ``not-run``
    mark without a reason, or one not right before a shell fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[ShellBlock] = []
    heading, level = "", 0
    in_section = section is None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m is None:
            h = re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
            if h:
                depth = len(h.group(1))
                if section is not None and h.group(2) == section:
                    in_section, level = True, depth
                elif section is not None and in_section and depth <= level:
                    in_section = False
                heading = h.group(2)
            i += 1
            continue
        fence, lang = m.group("fence"), m.group("lang").lower()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence)), None)
        if end is None:
            raise DocBlockError(f"{path.name}:{i + 1}: fence never closed")
        mark = _NOT_RUN.match(lines[i - 1].strip()) if i > 0 else None
        if mark is not None and not mark.group("reason"):
            raise DocBlockError(f"{path.name}:{i}: a not-run mark must say why")
        if mark is not None and lang not in SHELL_LANGUAGES:
            raise DocBlockError(f"{path.name}:{i}: not-run mark before a {lang or 'plain'} block")
        if lang in SHELL_LANGUAGES and in_section:
            blocks.append(ShellBlock(path, i + 1, heading, "\n".join(lines[i + 1:end]) + "\n",
                                     mark.group("reason") if mark else None))
        i = end + 1
    stray = [n + 1 for n, ln in enumerate(lines) if _NOT_RUN.match(ln.strip())
             and not (n + 1 < len(lines) and _FENCE.match(lines[n + 1]))]
    if stray:
        raise DocBlockError(f"{path.name}:{stray[0]}: a not-run mark must be right before its fence")
    return blocks
