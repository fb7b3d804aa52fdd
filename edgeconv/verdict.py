"""The release gate: one typed verdict, computed once, that every output renders.

Each check that can fail a build (a target, a gate on a target, a calibration finding, parity and
accuracy, the conversion's own proofs, memory, a regression against a baseline) becomes a
:class:`Check` with a stable id, its outcome, the measured value, the limit and the sentence a person
reads. :class:`Verdict` holds them all; the exit code, the console, report.json and report.md,
JUnit, the Markdown summary, GitHub annotations, ``--results-json`` and ``edgeconv diff`` render its
JSON form (``report["gate"]``) and decide nothing themselves.

The default gates are strict (:data:`DEFAULTS`): a pipeline loosens one only explicitly, and the
report and the console then say so (outcome ``off``).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._record import record
from .exit_codes import of_gate
from .gates import DEFAULTS as DEFAULTS
from .gates import Limits as Limits
from .targets.checker import TargetResult
from .targets.checker import Verdict as TargetVerdict
from .targets.target import OpStatus

if TYPE_CHECKING:
    from . import report_model as rm


class Outcome(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # the check could not be made (a target's own tool failed): fails the build
    WARN = "warn"  # reported, does not fail the build
    OFF = "off"  # a default gate the pipeline turned off or loosened: said, never silent

    @property
    def fails(self) -> bool:
        return self in (Outcome.FAIL, Outcome.ERROR)


FAILING = frozenset(o.value for o in Outcome if o.fails)  # the outcomes of a report's checks that fail it


def fails(outcome: str) -> bool:
    """Whether a check's outcome, as a report gives it ("fail", "error", ...), fails the build."""
    return outcome in FAILING


def target_passes(target: rm.TargetVerdict, checks: Sequence[rm.Check]) -> bool:
    """Whether a target passes in a report: its own verdict, and every check of the gate made on it
    (an accelerator's share of the MACs, a configured limit)."""
    return target["verdict"] == "pass" and not any(fails(c["outcome"]) for c in checks
                                                   if c.get("target") == target["name"])


class Kind(enum.Enum):
    TARGET = "target"  # the target runs every op (no unsupported op)
    ACCELERATOR = "accelerator"  # share of MACs an accelerator target runs
    GATE = "gate"  # a configured limit on a target (CPU fallback, MAC share, warnings)
    CALIBRATION = "calibration"  # a finding about the calibration data
    AGREEMENT = "agreement"  # the built model against the float model (SQNR, top-1 agreement, cosine)
    ACCURACY = "accuracy"  # task accuracy against the labels
    CONVERSION = "conversion"  # the passes and the float conversions compute what the source model does
    RUNTIME = "runtime"  # the built model runs on every calibration and evaluation sample
    MEMORY = "memory"  # arena and flash limits
    REGRESSION = "regression"  # against a baseline report


@record
class Check:
    id: str  # stable: target.edgetpu, agreement.sqnr_db.digit, calibration.noise.image, ...
    kind: Kind
    outcome: Outcome
    sentence: str
    measured: float | str | None = None
    limit: float | str | None = None
    target: str | None = None

    def to_json(self) -> rm.Check:
        return {"id": self.id, "kind": self.kind.value, "outcome": self.outcome.value, "sentence": self.sentence,
                "measured": self.measured, "limit": self.limit, "target": self.target}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Check:
        return cls(data["id"], Kind(data["kind"]), Outcome(data["outcome"]), data["sentence"], data.get("measured"),
                   data.get("limit"), data.get("target"))


@record
class Verdict:
    checks: tuple[Check, ...]

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.outcome.fails]

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def exit_code(self) -> int:
        return of_gate(self.to_json())

    def to_json(self) -> rm.Gate:
        return {"verdict": "pass" if self.passed else "fail",
                "reasons": [c.sentence for c in self.failed],
                "disabled": [c.sentence for c in self.checks if c.outcome is Outcome.OFF],
                "checks": [c.to_json() for c in self.checks]}

    @classmethod
    def from_json(cls, gate: Mapping[str, Any]) -> Verdict:
        return cls(tuple(Check.from_json(c) for c in gate.get("checks", [])))


# -- checks of each kind ------------------------------------------------------------------------

def target_checks(results: Sequence[TargetResult], limits: Limits, layers: Sequence[str] = ()) -> list[Check]:
    """Each target: it runs every op; its accelerator share; the gates configured on it. ``layers`` (the
    source model's layer names) lets the accelerator line name the layer of the op that stops it."""
    out: list[Check] = []
    for r in results:
        name = r.target.name
        c = r.counts()
        if r.verdict is TargetVerdict.ERROR:
            out.append(Check(f"target.{name}", Kind.TARGET, Outcome.ERROR, f"target {name}: no verdict: {r.error}",
                             target=name))
            continue
        bad = Counter(o.op.label for o in r.ops if o.status is OpStatus.UNSUPPORTED)
        if bad:
            sentence = (f"target {name}: {sum(bad.values())} unsupported op(s): "
                        + ", ".join(f"{k} x{v}" for k, v in sorted(bad.items())))
        else:
            sentence = f"target {name}: every op runs ({c['supported']} supported, {c['cpu_fallback']} cpu_fallback)"
        out.append(Check(f"target.{name}", Kind.TARGET, Outcome.FAIL if bad else Outcome.PASS, sentence,
                         measured=sum(bad.values()), limit=0, target=name))
        share = r.shares()["macs"]
        if r.target.accelerator:
            limit = limits.min_supported_mac_share.get(name, limits.min_accelerator_mac_share)
            out.append(_accelerator_check(r, share, limit, layers))
            if c["uncertain"]:
                out.append(_uncertain_check(r, gated=limit is not None and limits.uncertain_fails))
        elif name in limits.min_supported_mac_share:
            limit = limits.min_supported_mac_share[name]
            ok = share >= limit
            out.append(Check(f"gate.min_supported_mac_share.{name}", Kind.GATE, Outcome.PASS if ok else Outcome.FAIL,
                             f"target {name}: {share:.1%} of the MACs run supported"
                             + ("" if ok else f", less than gates.min_supported_mac_share.{name} = {limit:.1%}"),
                             measured=share, limit=limit, target=name))
        if name in limits.max_cpu_fallback_ops:
            limit_ops = limits.max_cpu_fallback_ops[name]
            fallback = c["cpu_fallback"]
            ok = fallback <= limit_ops
            first = r.first_blocking
            cause = f"; first blocking op #{first.op.index} {first.op.type}" if first is not None and not ok else ""
            out.append(Check(f"gate.max_cpu_fallback_ops.{name}", Kind.GATE, Outcome.PASS if ok else Outcome.FAIL,
                             f"target {name}: {fallback} op(s) fall back to the CPU"
                             + ("" if ok else f", more than gates.max_cpu_fallback_ops.{name} = {limit_ops}{cause}"),
                             measured=fallback, limit=limit_ops, target=name))
        if limits.fail_on_warnings:
            warnings = sum(len(o.warnings) for o in r.ops)
            out.append(Check(f"gate.fail_on_warnings.{name}", Kind.GATE, Outcome.FAIL if warnings else Outcome.PASS,
                             f"target {name}: {warnings} warning(s)"
                             + (" and gates.fail_on_warnings is set" if warnings else ""),
                             measured=warnings, limit=0, target=name))
    return out


def accelerator_line(r: TargetResult, layers: Sequence[str] = ()) -> str:
    """The way a vendor compiler says it: how many ops and how much of the compute run on the accelerator,
    and the first op that stops it (with its source layer)."""
    n = len(r.ops)
    on = r.counts()["supported"]
    where = r.target.accelerator_name or r.target.name
    doubt = r.counts()["uncertain"]
    unsure = f", {doubt} ops uncertain (counted off it)" if doubt else ""
    line = f"{r.target.name}: {on} of {n} ops ({r.shares()['macs']:.1%} of MACs) on the {where}{unsure}"
    first, what = r.first_blocking, "first blocking op"
    if first is None:
        first = next((o for o in r.ops if o.status is not OpStatus.SUPPORTED and o.op.subgraph == 0), None)
        what = "first op off it"
    if first is not None and first.violations:
        reason = next((v.detail for v in first.violations if v.effect.value != "warning"), first.violations[0].detail)
        found = []
        if layers:  # a build's (layer names come from its graph); `check` has none
            from .ir import source_layers

            found = sorted({x for t in first.op.outputs for x in source_layers(t.name, layers)})
        layer = f" (layer {', '.join(found)})" if found else ""
        line += f"; {what} #{first.op.index} {first.op.type}{layer}: {reason}"
    return line


def _uncertain_check(r: TargetResult, *, gated: bool) -> Check:
    """Ops the target cannot say run on the accelerator: off it in the share of the MACs, and a failure
    unless gates.uncertain is warn (or the target is not gated as an accelerator)."""
    name = r.target.name
    doubtful = [o for o in r.ops if o.status is OpStatus.UNCERTAIN]
    first = doubtful[0]
    why = next((v.detail for v in first.violations if v.effect.value == "uncertain"), "")
    where = r.target.accelerator_name or name
    sentence = (f"target {name}: {len(doubtful)} op(s) uncertain: they may not run on the {where} (counted off it); "
                f"first #{first.op.index} {first.op.type}: {why}")
    return Check(f"gate.uncertain.{name}", Kind.GATE, Outcome.FAIL if gated else Outcome.WARN,
                 sentence + ("; gates.uncertain: warn accepts them" if gated else ""), measured=len(doubtful),
                 limit=0, target=name)


def _accelerator_check(r: TargetResult, share: float, limit: float | None, layers: Sequence[str]) -> Check:
    name = r.target.name
    line = accelerator_line(r, layers)
    if limit is None:
        return Check(f"accelerator.{name}", Kind.ACCELERATOR, Outcome.WARN, line, measured=share, target=name)
    ok = share >= limit
    return Check(f"accelerator.{name}", Kind.ACCELERATOR, Outcome.PASS if ok else Outcome.FAIL,
                 line + ("" if ok else f"; less than the {limit:.0%} of MACs the gate requires "
                         f"(gates.min_supported_mac_share.{name})"), measured=share, limit=limit, target=name)


# What top1_agreement measures, by output kind (verify.outputs): a sigmoid unit's top-1 is its decision at 0.5,
# an index output's the share of its values equal to the source model's.
AGREEMENT = {"binary": "decision agreement (at 0.5)", "multilabel": "per-tag decision agreement (at 0.5)",
             "index": "agreement of its values"}


def labels_unused(labels: str, kinds: Mapping[str, str]) -> Check:
    """Evaluation labels no output can be scored with: said (a warning), never silently dropped."""
    said = ", ".join(f"{name} {kind}" for name, kind in kinds.items())
    return Check("accuracy.labels_unused", Kind.ACCURACY, Outcome.WARN,
                 f"the evaluation labels {labels!r} score no output ({said}): no accuracy is measured; declare the "
                 "output they score in verify.outputs (classification, or binary for one sigmoid unit with 0/1 "
                 "labels)")


def agreement_checks(parity: Mapping[str, Any], limits: Limits, candidate: str = "built") -> list[Check]:
    """The built model against the source model, per output; accuracy against the labels."""
    out: list[Check] = []
    data = parity.get("data", "evaluation")
    for name, per in parity["outputs"].items():
        m = per[candidate]
        sqnr, cosine, top1 = (limits.for_output(g, name) for g in ("min_sqnr_db", "min_cosine", "min_top1_agreement"))
        key = {g: f"gates.{g}.{name}" if name in limits.per_output.get(g, {}) else f"gates.{g}"
               for g in ("min_sqnr_db", "min_cosine", "min_top1_agreement")}
        if sqnr is not None and m["sqnr_db"] is not None:
            ok = m["sqnr_db"] >= sqnr
            out.append(Check(f"agreement.sqnr_db.{name}", Kind.AGREEMENT, Outcome.PASS if ok else Outcome.FAIL,
                             f"output {name!r}: SQNR {m['sqnr_db']:.1f} dB"
                             + (f" on the {data} samples" if ok else f" < {key['min_sqnr_db']} {sqnr:g} "
                                f"(on the {data} samples)"), measured=m["sqnr_db"], limit=sqnr))
        if cosine is not None:
            ok = m["cosine"] >= cosine
            out.append(Check(f"agreement.cosine.{name}", Kind.AGREEMENT, Outcome.PASS if ok else Outcome.FAIL,
                             f"output {name!r}: cosine similarity {m['cosine']:.4f}"
                             + ("" if ok else f" < {key['min_cosine']} {cosine:g}"),
                             measured=m["cosine"], limit=cosine))
        if top1 is not None and m["top1_agreement"] is not None:
            ok = m["top1_agreement"] >= top1
            what = AGREEMENT.get(parity.get("kinds", {}).get(name, ""), "top-1 agreement")
            out.append(Check(f"agreement.top1.{name}", Kind.AGREEMENT, Outcome.PASS if ok else Outcome.FAIL,
                             f"output {name!r}: {what} {m['top1_agreement']:.2%}"
                             + ("" if ok else f" < {key['min_top1_agreement']} {top1:.2%}")
                             + f" (on the {data} samples)", measured=m["top1_agreement"], limit=top1))
    accuracy = parity.get("accuracy")
    if limits.max_accuracy_drop is not None and accuracy is not None:
        drop = accuracy["drop"][candidate]
        ok = drop <= limits.max_accuracy_drop
        out.append(Check("accuracy.drop", Kind.ACCURACY, Outcome.PASS if ok else Outcome.FAIL,
                         f"accuracy drop {drop * 100:.2f} points ({accuracy['source']:.2%} -> "
                         f"{accuracy[candidate]:.2%})"
                         + ("" if ok else f" > gates.max_accuracy_drop {limits.max_accuracy_drop * 100:.2f} points"),
                         measured=drop, limit=limits.max_accuracy_drop))
    return out


def failed_sentences(checks: Iterable[Check]) -> list[str]:
    return [c.sentence for c in checks if c.outcome.fails]


def calibration_checks(findings: Sequence[Any], limits: Limits) -> list[Check]:
    """Findings about the calibration data: the severe ones (known to ruin an INT8 model) fail the build
    by default, the mild ones warn (``gates.fail_on_calibration_warnings`` makes every one fail)."""
    out = []
    for f in findings:
        fails = limits.calibration_warnings_fail or (f.severe and limits.calibration_findings_fail)
        where = f".{f.input}" if f.input else ""
        out.append(Check(f"calibration.{f.check}{where}", Kind.CALIBRATION, Outcome.FAIL if fails else Outcome.WARN,
                         f"calibration: {f.message}"))
    return out


def repair_check(found: Mapping[str, Any], max_trials: int) -> Check:
    """The repair search: failed without a passing trial; a warning when the chosen change changes the model's
    interface (allowed by repair.allow_interface_change, and said wherever a warning is) or fails on the
    held-back samples (the rebuilt model's gates, on every sample, decide)."""
    chosen = found["chosen"]
    winner: Mapping[str, Any] = found["trials"][chosen - 1] if chosen is not None else {}
    doubt = winner.get("interface_change") or (winner.get("held_back") or {}).get("failed")
    outcome = Outcome.FAIL if chosen is None else Outcome.WARN if doubt else Outcome.PASS
    return Check("repair.search", Kind.AGREEMENT, outcome, found["summary"], len(found["trials"]), max_trials)


def simple(check_id: str, kind: Kind, ok: bool, sentence: str, measured: float | str | None = None,
           limit: float | str | None = None) -> Check:
    return Check(check_id, kind, Outcome.PASS if ok else Outcome.FAIL, sentence, measured, limit)


def drift_checks(drift: Mapping[str, Any] | None, limits: Limits) -> list[Check]:
    """gates.max_runtime_drift_lsb: each runtime measured against the reference (a runtime that could not be
    compared fails the gate: it proves nothing)."""
    if limits.max_runtime_drift_lsb is None or drift is None:
        return []
    limit = limits.max_runtime_drift_lsb
    out = []
    for kind, r in drift["runtimes"].items():
        if r.get("error"):
            out.append(Check(f"drift.{kind}", Kind.RUNTIME, Outcome.FAIL, f"runtime {kind}: not compared with the "
                             f"reference ({r['error']}), so gates.max_runtime_drift_lsb {limit} is not met",
                             None, limit, r.get("target")))
            continue
        worst = r["max_lsb"]
        first = r["ops"][0] if r["ops"] else None
        where = (f"; first at op #{first['op']} {first['type']} ({first['max_lsb']} LSB on {first['differ']:.2%} of "
                 "its values)" if first else "")
        ok = worst <= limit
        out.append(Check(f"drift.{kind}", Kind.RUNTIME, Outcome.PASS if ok else Outcome.FAIL,
                         f"runtime {kind} ({r.get('target')}): at most {worst} LSB from the reference on "
                         f"{r['tensors_compared']} op output(s)" + ("" if ok else
                                                                   f" > gates.max_runtime_drift_lsb {limit}{where}"),
                         worst, limit, r.get("target")))
    return out


def memory_checks(memory: Mapping[str, Any], limits: Limits) -> list[Check]:
    out = []
    if limits.max_arena_bytes is not None:
        arena = memory["arena_bytes"]
        ok = arena <= limits.max_arena_bytes
        out.append(simple("memory.arena_bytes", Kind.MEMORY, ok, f"estimated tensor arena {arena:,} bytes"
                          + ("" if ok else f" > gates.max_arena_bytes {limits.max_arena_bytes:,}"), arena,
                          limits.max_arena_bytes))
    if limits.max_flash_bytes is not None:
        flash = memory["flash_bytes"]
        ok = flash <= limits.max_flash_bytes
        out.append(simple("memory.flash_bytes", Kind.MEMORY, ok, f"model size {flash:,} bytes"
                          + ("" if ok else f" > gates.max_flash_bytes {limits.max_flash_bytes:,}"), flash,
                          limits.max_flash_bytes))
    return out


def regression_checks(failed: Sequence[str], names: Sequence[str]) -> list[Check]:
    """The regression gates against a baseline: each configured one passes unless a reason names it."""
    out = [Check(f"regression.{i}", Kind.REGRESSION, Outcome.FAIL, f"regression since the baseline: {r}")
           for i, r in enumerate(failed)]
    if not failed:
        out += [Check(f"regression.{n.removeprefix('gates.')}", Kind.REGRESSION, Outcome.PASS,
                      f"{n}: no regression since the baseline") for n in names]
    return out


def off(gate: str, sentence: str) -> Check:
    return Check(f"default.{gate}", Kind.GATE, Outcome.OFF, sentence)


def onnx_float_check(worst: float, tolerance: float) -> Check:
    """The float ONNX model against the source model: its largest difference within verify.float_tolerance
    (at it passes)."""
    return simple("conversion.onnx_float", Kind.CONVERSION, worst <= tolerance,
                  f"the float ONNX model differs from the source model by {worst:.3g}"
                  + (f" (> verify.float_tolerance {tolerance:g}): a tf2onnx conversion problem"
                     if worst > tolerance else ""), worst, tolerance)


def conversion_checks(limits: Limits, equivalence: Mapping[str, Any], findings: Sequence[Any],
                      calibrated: bool) -> list[Check]:
    """The checks a build makes before it runs the model: each default gate the pipeline loosened (off),
    the passes' equivalence proof, and (with calibration data) the findings about the data."""
    proof = simple("conversion.passes", Kind.CONVERSION, equivalence["passed"],
                   f"the passes changed the outputs: max abs difference {equivalence['max_abs_diff']:.3g} > "
                   f"verify.pass_tolerance {equivalence['tolerance']:g}" if not equivalence["passed"] else
                   f"the passes changed nothing (max abs difference {equivalence['max_abs_diff']:.3g})",
                   equivalence["max_abs_diff"], equivalence["tolerance"])
    return [*(off(f"{i}", note.sentence) for i, note in enumerate(limits.notes)), proof,
            *(calibration_checks(findings, limits) if calibrated else ())]
