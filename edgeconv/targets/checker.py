"""Check every op of a .tflite against a target: all rules evaluated, nothing printed."""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter

from ..converters.tflite_reader import OpInfo, TFLiteModel
from .target import OpStatus, Rule, Target


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"


@dataclasses.dataclass(frozen=True)
class Violation:
    rule: str  # stable id: <target>.<OP>.<rule>
    text: str
    detail: str
    fix: str
    status: OpStatus
    source: str


@dataclasses.dataclass(frozen=True)
class OpResult:
    op: OpInfo
    status: OpStatus
    violations: tuple[Violation, ...]


@dataclasses.dataclass(frozen=True)
class TargetResult:
    target: Target
    ops: tuple[OpResult, ...]

    @property
    def verdict(self) -> Verdict:
        return Verdict.FAIL if any(r.status is OpStatus.UNSUPPORTED for r in self.ops) else Verdict.PASS

    def counts(self) -> dict[str, int]:
        counted = Counter(r.status.value for r in self.ops)
        return {s.value: counted.get(s.value, 0) for s in OpStatus}


def _violation(target: Target, op: OpInfo, rule: Rule, detail: str, fix: str | None = None) -> Violation:
    return Violation(f"{target.name}.{op.type}.{rule.id}", rule.text, detail,
                     rule.fix if fix is None else fix, rule.status, target.sources.get(rule.source, rule.source))


def check_op(op: OpInfo, model: TFLiteModel, target: Target) -> OpResult:
    violations: list[Violation] = []
    for rule in target.all_ops:
        ok, detail = rule.fn(op, model, **rule.params)
        if not ok:
            violations.append(_violation(target, op, rule, detail))
    entry = target.entry_for(op.type, op.custom_code)
    if entry is None:
        note = target.notes.get(op.label) or target.notes.get(op.type)
        detail = note.detail if note else f"{op.label} has no entry in the {target.name} op table"
        violations.append(_violation(target, op, target.unlisted, detail,
                                     note.fix if note and note.fix else target.unlisted.fix))
    else:
        for rule in entry.rules:
            ok, detail = rule.fn(op, model, **rule.params)
            if not ok:
                violations.append(_violation(target, op, rule, detail))
    status = max((v.status for v in violations), key=lambda s: s.rank, default=OpStatus.SUPPORTED)
    return OpResult(op, status, tuple(violations))


def check_model(model: TFLiteModel, target: Target) -> TargetResult:
    """Evaluate every rule of ``target`` on every op of ``model``."""
    return TargetResult(target, tuple(check_op(op, model, target) for op in model.ops))
