"""What a pass is and what it reports."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar, Protocol

from .._record import record
from ..ir import FrozenGraph


@record
class Removal:
    """One graph node a pass removed, and why."""

    op_type: str
    node: str
    layers: tuple[str, ...]
    reason: str


@record
class Rewrite:
    """A subgraph a pass replaced (e.g. a dropout that became an identity)."""

    layers: tuple[str, ...]
    node: str
    description: str


@record
class PassResult:
    """What one pass changed: op-type counts before and after, every removal
    (attributed to source layers), rewrites, and notes for the report."""

    name: str
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    removed: tuple[Removal, ...] = ()
    rewrites: tuple[Rewrite, ...] = ()
    notes: tuple[str, ...] = ()

    def removed_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(r.op_type for r in self.removed).items()))

    def removed_by_layer(self) -> dict[str, dict[str, int]]:
        """Removed op counts per source layer ("(no layer)" for graph plumbing)."""
        table: dict[str, Counter[str]] = {}
        for r in self.removed:
            for layer in r.layers or ("(no layer)",):
                table.setdefault(layer, Counter())[r.op_type] += 1
        return {layer: dict(sorted(c.items())) for layer, c in sorted(table.items())}

    def removed_by_reason(self) -> dict[str, dict[str, int]]:
        table: dict[str, Counter[str]] = {}
        for r in self.removed:
            table.setdefault(r.reason, Counter())[r.op_type] += 1
        return {reason: dict(sorted(c.items())) for reason, c in table.items()}


class GraphPass(Protocol):
    """A graph cleanup pass: a frozen dataclass whose fields are its typed options.

    ``apply`` returns the new graph and what changed; it raises ModelError when the
    graph holds something the pass must not guess about.
    """

    name: ClassVar[str]
    summary: ClassVar[str]

    def apply(self, graph: FrozenGraph) -> tuple[FrozenGraph, PassResult]: ...
