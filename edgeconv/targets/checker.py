"""Check every op of a .tflite against a target: all rules evaluated, nothing printed.

Each op is first judged on its own rules. A target with segment placement (the Edge TPU
compiler) then applies its single-segment rule along the data dependencies: an op is mapped
when it can be and none of the ops it depends on is a *blocking* op, an op that cannot be
mapped but depends on the segment (the compiler cannot enter the segment twice). Ops that
cannot be mapped and depend on nothing mapped (the QUANTIZE of a float input) run on the CPU
ahead of the segment; ops that depend on a blocking op run on the CPU after it, even when they
are supported. An op past a size limit whose exact value no source gives is ``uncertain``, and
so is every supported op that depends on it: they map only if it does.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from collections.abc import Mapping, Sequence

from .._log import get_logger
from .._record import record
from ..converters.tflite_reader import OpInfo, TFLiteModel
from .constraints import AFTER_PLACEMENT
from .cost import OpCost, op_cost
from .parameter_memory import estimate
from .target import Effect, OpStatus, Placement, Rule, Target

log = get_logger(__name__)


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # the target's own tool failed on the model: no verdict could be computed


@record
class Violation:
    rule: str  # stable id: <target>.<OP>.<rule>
    text: str
    detail: str
    fix: str
    effect: Effect
    source: str


@record
class OpResult:
    op: OpInfo
    status: OpStatus
    violations: tuple[Violation, ...]
    cost: OpCost
    follows_blocking: bool = False  # on the CPU only because it depends on a blocking op
    blocked_by: int | None = None  # index of the blocking (or uncertain) op it depends on

    @property
    def warnings(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if v.effect is Effect.WARNING)


@record
class TargetResult:
    target: Target
    ops: tuple[OpResult, ...]
    first_blocking: OpResult | None = None  # segment placement: the first root cause of the CPU fallback
    blocking: tuple[OpResult, ...] = ()  # every blocking op (segment placement), in op order
    error: str | None = None  # the target could not be checked (its compiler failed): the verdict is error
    estimates: Mapping[str, float] | None = None  # a compiler's own estimates (SRAM, flash, cycles)

    @property
    def verdict(self) -> Verdict:
        if self.error is not None:
            return Verdict.ERROR
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
    """Evaluate every rule that applies to ``op`` on its own (placement, and the rules that need the other
    ops' statuses, not included: :func:`_after_placement`)."""
    violations: list[Violation] = []
    for rule in target.all_ops:
        if rule.check in AFTER_PLACEMENT:
            continue
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
            if rule.check in AFTER_PLACEMENT:
                continue
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
    results = _after_placement([check_op(op, model, target) for op in model.ops], model, target)
    if target.placement is Placement.SEGMENT and target.segment_rule is not None:
        placed = _place_segment(results, target, target.segment_rule)
    else:
        placed = TargetResult(target, tuple(results))
    if target.parameter_memory is not None:  # the parameters of the ops it maps, on-chip or streamed
        mapped = [r.op for r in placed.ops if r.status is OpStatus.SUPPORTED]
        placed = dataclasses.replace(placed, estimates=estimate(mapped, target.parameter_memory))
    return placed


def _after_placement(results: list[OpResult], model: TFLiteModel, target: Target) -> list[OpResult]:
    """The rules that judge an op by the statuses the other ops got on their own rules (an op a runtime
    folds into the ops that read it)."""
    later = [(k, rule) for k, r in enumerate(results) for rule in _rules_of(r.op, target)
             if rule.check in AFTER_PLACEMENT]
    if not later:
        return results
    placed = {(r.op.subgraph, r.op.index): r.status.value for r in results}
    out = list(results)
    for k, rule in later:
        r = out[k]
        ok, detail = rule.fn(r.op, model, placed, **rule.params)
        if not ok:
            violations = (*r.violations, _violation(target, r.op, rule, detail))
            out[k] = dataclasses.replace(r, status=_status(list(violations)), violations=violations)
    return out


def _rules_of(op: OpInfo, target: Target) -> tuple[Rule, ...]:
    entry = target.entry_for(op.type, op.custom_code)
    return (*target.all_ops, *(entry.rules if entry is not None else ()))


def _place_segment(results: list[OpResult], target: Target, rule: Rule) -> TargetResult:
    """Apply the single segment along data dependencies (main subgraph; ops are in execution order)."""
    producer: dict[int, int] = {}  # tensor index -> position of the op that writes it
    state: list[str] = []  # mapped | maybe | pre | post
    root: list[int | None] = []  # the blocking (post) or uncertain (maybe) op an op's state comes from
    after: list[bool] = []  # depends on the segment
    placed = list(results)
    main = [k for k, r in enumerate(results) if r.op.subgraph == 0]
    blocking: list[OpResult] = []
    for pos, k in enumerate(main):
        r = results[k]
        parents = sorted({producer[t.index] for t in r.op.inputs if t is not None and t.index in producer})
        for t in r.op.outputs:
            producer[t.index] = pos
        post = [p for p in parents if state[p] == "post"]
        maybe = [p for p in parents if state[p] == "maybe"]
        depends = any(state[p] in ("mapped", "maybe") or after[p] for p in parents)
        after.append(depends)
        if post:
            state.append("post")
            root.append(root[post[0]])
            first = results[main[root[post[0]]]]  # type: ignore[index]
            detail = f"depends on the output of blocking op #{first.op.index} {first.op.type}"
            violations = (*r.violations, _violation(target, r.op, rule, detail))
            placed[k] = dataclasses.replace(r, status=_status(list(violations)), violations=violations,
                                            follows_blocking=r.status in (OpStatus.SUPPORTED, OpStatus.UNCERTAIN),
                                            blocked_by=first.op.index)
        elif r.status is OpStatus.SUPPORTED and maybe:
            state.append("maybe")
            root.append(root[maybe[0]])
            doubt = results[main[root[maybe[0]]]]  # type: ignore[index]
            detail = (f"depends on #{doubt.op.index} {doubt.op.type}, which may not be mapped: it is mapped only "
                      "if that op is")
            violations = (*r.violations, Violation(f"{target.name}.{r.op.type}.{rule.id}", rule.text, detail,
                                                   rule.fix, Effect.UNCERTAIN, target.sources.get(rule.source,
                                                                                                  rule.source)))
            placed[k] = dataclasses.replace(r, status=OpStatus.UNCERTAIN, violations=violations,
                                            blocked_by=doubt.op.index)
        elif r.status is OpStatus.SUPPORTED:
            state.append("mapped")
            root.append(None)
        elif r.status is OpStatus.UNCERTAIN:
            state.append("maybe")
            root.append(pos)
        elif depends:
            state.append("post")
            root.append(pos)
            blocking.append(r)
        else:
            state.append("pre")
            root.append(None)
    return TargetResult(target, tuple(placed), blocking[0] if blocking else None, tuple(blocking))


def check_targets(model: TFLiteModel, targets: Sequence[Target]) -> tuple[TargetResult, ...]:
    """Every op of ``model`` against every target (every rule evaluated)."""
    log.info("checking %d ops against %s", len(model.ops), ", ".join(t.name for t in targets))
    return tuple(check_model(model, t) for t in targets)
