"""The import cycles of the edgeconv package: groups of modules that import one another (module-level and
lazy imports; imports under TYPE_CHECKING do not run and are left out). tests/unit/test_import_cycles.py
keeps them at most 3, none through pipeline.py.

    python scripts/import_cycles.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "edgeconv"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in ROOT.rglob("*.py"):
        name = ".".join(p.relative_to(ROOT.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        tree = ast.parse(p.read_text())
        skip = {id(n) for block in ast.walk(tree)
                if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test) for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                package = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
                parts = package.split(".")
                base = parts[:len(parts) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                for c in (subs if subs and len(subs) == len(node.names) else [target, *subs]):
                    if c in mods and c != m:
                        edges[m].add(c)
            elif isinstance(node, ast.Import):
                edges[m].update(a.name for a in node.names if a.name in mods and a.name != m)
    return edges


def cycles() -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    mods = _modules()
    edges = _edges(mods)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(mods):
        if v not in index:
            visit(v)
    return sorted(found)


if __name__ == "__main__":
    groups = cycles()
    print(f"{len(groups)} import cycle(s)")
    for group in groups:
        print("  " + ", ".join(group))
