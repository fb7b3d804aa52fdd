"""The registry of constraint kinds and how a rule's text is made from a docstring."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

Check = tuple[bool, str]
# Rule parameters typed DtypeSpecs are validated as dtype specs ("int8|uint8", "int8...", "float32-io").
DtypeSpecs = list[str]
Constraint = Callable[..., Check]
OK: Check = (True, "")

CONSTRAINTS: dict[str, Constraint] = {}
# Constraints that judge an op by how the ops that read it were judged (XNNPACK folds a dequantized
# constant only into delegated ops): ``(op, model, placed, **params)``, where ``placed`` maps each op's
# (subgraph, index) to its status on its own rules; evaluated after every op was judged on its own.
AFTER_PLACEMENT: set[str] = set()


def constraint(fn: Constraint) -> Constraint:
    if fn.__name__ in CONSTRAINTS:
        raise ValueError(f"constraint {fn.__name__} registered twice")
    CONSTRAINTS[fn.__name__] = fn
    return fn


def placement_constraint(fn: Constraint) -> Constraint:
    """Register a constraint evaluated with the other ops' statuses (see ``AFTER_PLACEMENT``)."""
    AFTER_PLACEMENT.add(fn.__name__)
    return constraint(fn)


def rule_text(fn: Constraint, params: dict[str, Any]) -> str:
    doc = " ".join((inspect.getdoc(fn) or fn.__name__).split())
    return doc.format(**{k: render_param(v) for k, v in params.items()})


def render_param(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(render_param(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).replace("float32-io", "float32 (model I/O only)")


def params_of(fn: Constraint) -> dict[str, inspect.Parameter]:
    """The rule parameters a constraint takes (its keyword-only arguments)."""
    return {name: p for name, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}
