"""Check every op of a .tflite against a target: all rules evaluated, nothing printed.

Each op is first judged on its own rules. A target with prefix placement (the
Edge TPU compiler) then applies its single-segment rule: ops it cannot map before
the first one it can (typically the QUANTIZE of a float input) run on the CPU ahead
of the segment; the segment starts at the first mappable op and ends at the first
op after it that cannot be mapped, the first *blocking* op; every later op of that
subgraph falls back to the CPU with the segment rule as its reason, even when it is
supported.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from collections.abc import Mapping

from ..converters.tflite_reader import OpInfo, TFLiteModel
from .cost import OpCost, op_cost
from .target import Effect, OpStatus, Placement, Rule, Target


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"


@dataclasses.dataclass(frozen=True)
class Violation:
    rule: str  # stable id: <target>.<OP>.<rule>
    text: str
    detail: str
    fix: str
    effect: Effect
    source: str


@dataclasses.dataclass(frozen=True)
class OpResult:
    op: OpInfo
    status: OpStatus
    violations: tuple[Violation, ...]
    cost: OpCost
    follows_blocking: bool = False  # on the CPU only because an earlier op ended the segment

    @property
    def warnings(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if v.effect is Effect.WARNING)


@dataclasses.dataclass(frozen=True)
class TargetResult:
    target: Target
    ops: tuple[OpResult, ...]
    first_blocking: OpResult | None = None  # prefix placement: the root cause of the CPU fallback
    estimates: Mapping[str, float] | None = None  # a compiler's own estimates (SRAM, flash, cycles)

    @property
    def verdict(self) -> Verdict:
        return Verdict.FAIL if any(r.status is OpStatus.UNSUPPORTED for r in self.ops) else Verdict.PASS

    def counts(self) -> dict[str, int]:
        counted = Counter(r.status.value for r in self.ops)
        return {s.value: counted.get(s.value, 0) for s in OpStatus}

    def macs(self) -> dict[str, int]:
        totals = Counter({s.value: 0 for s in OpStatus})
        for r in self.ops:
            totals[r.status.value] += r.cost.macs
        return dict(totals)

    def shares(self) -> dict[str, float]:
        """Share of ops and of MACs that run supported (on the accelerator / optimized kernels)."""
        macs = self.macs()
        total_macs = sum(macs.values())
        n = len(self.ops)
        return {"ops": self.counts()["supported"] / n if n else 1.0,
                "macs": macs["supported"] / total_macs if total_macs else 1.0}


def _violation(target: Target, op: OpInfo, rule: Rule, detail: str, fix: str | None = None) -> Violation:
    return Violation(f"{target.name}.{op.type}.{rule.id}", rule.text, detail,
                     rule.fix if fix is None else fix, rule.effect, target.sources.get(rule.source, rule.source))


def _status(violations: list[Violation]) -> OpStatus:
    return max((v.effect.status for v in violations), key=lambda s: s.rank, default=OpStatus.SUPPORTED)


def check_op(op: OpInfo, model: TFLiteModel, target: Target) -> OpResult:
    """Evaluate every rule that applies to ``op`` on its own (placement not included)."""
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
    return OpResult(op, _status(violations), tuple(violations), op_cost(op))


def check_model(model: TFLiteModel, target: Target) -> TargetResult:
    """Evaluate every rule of ``target`` on every op of ``model``, then apply its placement.

    A compiler-backed target runs its compiler instead (see :mod:`edgeconv.targets.vela`)."""
    if target.compiler is not None:
        from .vela import place_with_vela

        return place_with_vela(model, target)
    results = [check_op(op, model, target) for op in model.ops]
    if target.placement is Placement.PREFIX and target.segment_rule is not None:
        return _place_prefix(results, target, target.segment_rule)
    return TargetResult(target, tuple(results))


def _place_prefix(results: list[OpResult], target: Target, rule: Rule) -> TargetResult:
    first: OpResult | None = None
    started = False
    placed = []
    for r in results:
        if r.op.subgraph != 0:
            placed.append(r)
            continue
        if first is None:
            if r.status is OpStatus.SUPPORTED:
                started = True
            elif started:
                first = r
            placed.append(r)
            continue
        blocker = f"#{first.op.index} {first.op.type}"
        violation = _violation(target, r.op, rule, f"after the first blocking op {blocker}")
        violations = (*r.violations, violation)
        placed.append(dataclasses.replace(r, status=_status(list(violations)), violations=violations,
                                          follows_blocking=r.status is OpStatus.SUPPORTED))
    return TargetResult(target, tuple(placed), first)
