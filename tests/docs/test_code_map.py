"""docs/development.md's map of the code stays true: its table names every package of the tree
(a directory with ``__init__.py`` under rlm, rsm_plugins, rlmm, fetcher) and nothing else, and
every module it names in the request flows exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOTS = ("rlm", "rsm_plugins", "rlmm", "fetcher")


def _section() -> str:
    text = (ROOT / "docs" / "development.md").read_text()
    start = text.index("## Map of the code\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _packages() -> set[str]:
    return {".".join(p.parent.relative_to(ROOT).parts)
            for top in ROOTS for p in (ROOT / top).rglob("__init__.py") if "__pycache__" not in p.parts}


def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def test_the_map_names_every_package_and_only_those() -> None:
    rows = re.findall(r"^\|[^|]*\| `([a-z_.]+)` \|", _section(), flags=re.M)
    assert len(rows) == len(set(rows)), f"a package is named twice: {rows}"
    named, tree = set(rows), _packages()
    assert not tree - named, f"packages missing from docs/development.md's map: {sorted(tree - named)}"
    assert not named - tree, f"the map names packages that do not exist: {sorted(named - tree)}"


def test_every_module_the_map_names_exists() -> None:
    roots = "|".join(ROOTS)
    names = set(re.findall(rf"`((?:{roots})(?:\.[A-Za-z_][A-Za-z0-9_]*)*)`", _section()))
    assert names, "no module named"
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):  # the longest prefix that is a module
            found = _module_file(".".join(parts[:cut]))
            if found is not None:
                break
        assert found is not None, f"docs/development.md's map names {name}: no such module"
        rest = parts[cut:]
        missing = ".".join(parts[:cut + 1])
        assert len(rest) <= 1, f"docs/development.md's map names {name}: no module {missing}"
        if rest:
            assert re.search(rf"\b{rest[0]}\b", found.read_text()), f"{name}: {found} has no {rest[0]}"
