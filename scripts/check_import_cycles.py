"""Fails on any import circle among the project's modules (``make lint``, tests/test_import_cycles.py).

import-linter's contracts say which layer may import which, but not that two modules of one layer
never import each other (``a`` imports ``b`` imports ``a``, at module level, inside a function or
under ``TYPE_CHECKING``: each is a circle a reader has to untangle). This builds the import graph
with grimp (import-linter's own graph library) and prints every strongly connected group of
modules; exit status 1 when there is one.

Usage: ``python scripts/check_import_cycles.py [ROOT]`` (ROOT: the checkout; default: this one).
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGES = ("rlm", "rsm_plugins", "rlmm", "fetcher")


def import_cycles(root: Path) -> list[list[str]]:
    """Each group of modules under ``root`` that import one another in a circle, sorted."""
    import grimp

    sys.path.insert(0, str(root))
    try:
        graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    finally:
        sys.path.remove(str(root))
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    # Tarjan's strongly connected components, iteratively (no recursion limit to meet)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            succ = edges[node]
            if i < len(succ):
                work.append((node, i + 1))
                nxt = succ[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    group.append(m)
                    if m == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


def main(argv: list[str]) -> int:
    root = Path(argv[1]).resolve() if len(argv) > 1 else Path(__file__).resolve().parents[1]
    cycles = import_cycles(root)
    for group in cycles:
        print("import circle: " + " <-> ".join(group))
    print(f"{len(cycles)} import circles among the modules of {', '.join(PACKAGES)}")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
