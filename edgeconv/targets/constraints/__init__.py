"""Constraint kinds: the code behind target rules.

A constraint is a small function ``(op, model, **params) -> (ok, detail)``. Its
docstring, formatted with the rule's parameters, *is* the rule text shown in
reports, ``edgeconv targets show`` and docs/SUPPORTED_OPS.md. ``detail`` says what
was observed when the rule does not hold. One module per family of constraints;
each registers its functions with :func:`constraint`.
"""

from __future__ import annotations

from . import core, folding, layout, options, quantization, versions  # noqa: F401  (registration)
from .core import dtype_matches, expand_spec
from .registry import (
    AFTER_PLACEMENT,
    CONSTRAINTS,
    OK,
    Check,
    Constraint,
    constraint,
    params_of,
    render_param,
    rule_text,
)

__all__ = ["AFTER_PLACEMENT", "CONSTRAINTS", "OK", "Check", "Constraint", "constraint", "dtype_matches", "expand_spec",
           "params_of", "render_param", "rule_text"]
