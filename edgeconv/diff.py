"""What changed between two builds: two report.json files compared (no TensorFlow, no models).

Ops added and removed per type, per-target verdicts and the op types that fall back or are
unsupported now but were not before, size, arena, parity and accuracy deltas; and the
regression gates a release can fail on.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import markdown as md
from . import verdict
from ._record import record
from .errors import EdgeconvError, rel
from .schema_check import first_problem
from .verdict import fails

if TYPE_CHECKING:
    from . import report_model as rm

NOT_SUPPORTED = ("cpu_fallback", "unsupported")


@record
class RegressionGates:
    max_size_growth: float | None = None  # share of the baseline's .tflite size
    max_arena_growth: float | None = None  # share of the baseline's arena estimate
    max_accuracy_regression: float | None = None  # built accuracy, absolute (0..1)
    no_new_fallback: tuple[str, ...] = ()  # targets on which no op type may newly leave the accelerator

    @property
    def names(self) -> list[str]:
        return [f"gates.{f.name}" for f in dataclasses.fields(self) if getattr(self, f.name)]

    @property
    def any(self) -> bool:
        return bool(self.names)


def load_report(path: str | Path) -> rm.Report:
    """A report.json, or a clear error naming the file; what it returns holds to the report's schema (checked
    here), so it is typed as the report."""
    from .inputs import MAX_REPORT_BYTES, read_bytes

    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.exists() and not path.is_symlink():
        raise EdgeconvError(f"{rel(path)}: no such report (give a report.json or the output folder holding "
                            "one)")
    raw = read_bytes(path, MAX_REPORT_BYTES, what="report.json")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise EdgeconvError(f"{rel(path)}: not an edgeconv report ({exc})") from None
    return report_from_data(data, rel(path))


def report_from_data(data: Any, where: str) -> rm.Report:
    """A parsed report.json, checked against the report's schema; a clear error naming ``where`` otherwise."""
    if not isinstance(data, dict) or "tflite" not in data or "targets" not in data:
        raise EdgeconvError(f"{where}: not an edgeconv report (no tflite or targets section)")
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise EdgeconvError(f"{where}: not a valid edgeconv report: $.schema_version: expected a positive "
                            f"integer, got {version!r}")
    if version != SCHEMA_VERSION:
        raise EdgeconvError(f"{where}: report schema_version {version!r} is not one this "
                            f"edgeconv reads ({SCHEMA_VERSION}); compare reports of the same edgeconv release")
    problem = first_problem(data, _report_schema())
    if problem:
        raise EdgeconvError(f"{where}: not a valid edgeconv report: {problem}")
    return typing.cast("rm.Report", data)


@functools.cache
def _report_schema() -> dict[str, Any]:
    """The generated report schema (edgeconv/schemas/report.schema.json, as report.SCHEMA_PATH)."""
    return dict(json.loads((Path(__file__).parent / "schemas" / "report.schema.json").read_text()))


SCHEMA_VERSION = 1  # report.REPORT_SCHEMA_VERSION (not imported: diff stays free of the report module)


def _not_supported(target: rm.TargetVerdict) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {s: Counter() for s in NOT_SUPPORTED}
    for op in target["ops"]:
        if op["status"] in out:
            out[op["status"]][op["type"]] += 1
    return out


def _delta(old: float | None, new: float | None) -> dict[str, float | None]:
    return {"old": old, "new": new, "delta": None if old is None or new is None else new - old}


def _gate_delta(old: rm.Gate, new: rm.Gate) -> dict[str, Any]:
    """The two verdicts, and which of their checks newly fail or no longer fail (by check id)."""
    def failing(gate: rm.Gate) -> set[str]:
        return {c["id"] for c in gate.get("checks", []) if fails(c["outcome"])}

    return {"old": old.get("verdict", "-"), "new": new.get("verdict", "-"),
            "newly_failed": sorted(failing(new) - failing(old)), "fixed": sorted(failing(old) - failing(new))}


def _verdict(target: rm.TargetVerdict, report: rm.Report) -> str:
    """A target's verdict in a report: an error stays an error; else pass or fail as verdict.target_passes."""
    if target["verdict"] == "error":
        return "error"
    return "pass" if verdict.target_passes(target, report["gate"]["checks"]) else "fail"


def diff(old: rm.Report, new: rm.Report) -> dict[str, Any]:
    """The changes from ``old`` to ``new`` (two report dicts)."""
    before, after = Counter(old["tflite"]["op_types"]), Counter(new["tflite"]["op_types"])
    out: dict[str, Any] = {
        "old": {"name": old.get("name"), "sha256": old["tflite"]["sha256"], "created": old.get("created")},
        "new": {"name": new.get("name"), "sha256": new["tflite"]["sha256"], "created": new.get("created")},
        "same_model": old["tflite"]["sha256"] == new["tflite"]["sha256"],
        "ops": {"added": dict(sorted((after - before).items())), "removed": dict(sorted((before - after).items()))},
        "size": _delta(old["tflite"]["bytes"], new["tflite"]["bytes"]),
        "arena": _delta(*(m["arena_bytes"] if (m := r.get("memory")) is not None else None for r in (old, new))),
        "gate": _gate_delta(old["gate"], new["gate"]),
        "targets": [],
        "accuracy": None,
        "parity": {},
    }
    old_targets = {t["name"]: t for t in old["targets"]}
    for t in new["targets"]:
        was = old_targets.get(t["name"])
        now_ns = _not_supported(t)
        # Each target's verdict with the gate checks made on it (an accelerator's share, its configured limits).
        entry: dict[str, Any] = {"name": t["name"], "old_verdict": _verdict(was, old) if was else None,
                                 "new_verdict": _verdict(t, new), "old_counts": was["counts"] if was else None,
                                 "new_counts": t["counts"]}
        was_ns = _not_supported(was) if was else {s: Counter() for s in NOT_SUPPORTED}
        for status in NOT_SUPPORTED:
            entry[f"new_{status}"] = dict(sorted((now_ns[status] - was_ns[status]).items()))
            entry[f"fixed_{status}"] = dict(sorted((was_ns[status] - now_ns[status]).items()))
        out["targets"].append(entry)
    out["targets_removed"] = sorted(set(old_targets) - {t["name"] for t in new["targets"]})
    out["warnings"] = _warnings(old, new, out)
    # The schema leaves parity.accuracy open (one share per model compared) and a parity pair optional: read
    # only what is there and has the type a share has.
    acc_old, acc_new = (number_at(p.get("accuracy") if (p := r.get("parity")) else None, "built")
                        for r in (old, new))
    if acc_old is not None and acc_new is not None:
        out["accuracy"] = _delta(acc_old, acc_new)
    parity_old, parity_new = (p["outputs"] if (p := r.get("parity")) else {} for r in (old, new))
    for name, per in parity_new.items():
        if "built" in per and "built" in parity_old.get(name, {}):
            out["parity"][name] = {key: _delta(parity_old[name]["built"][key], per["built"][key])
                                   for key in ("sqnr_db", "top1_agreement", "max_abs_error")}
    return out


def number_at(section: Any, key: str) -> float | None:
    """``section[key]`` when ``section`` is a mapping and that value a number (not a bool), else None: the
    report schema leaves some sections' values open (an accuracy's keys are the models compared)."""
    value = section.get(key) if isinstance(section, Mapping) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _signature(report: rm.Report,
               side: typing.Literal["inputs", "outputs"]) -> list[tuple[str, tuple[int, ...], str]]:
    return [(str(t.get("signature_name", t.get("name"))), tuple(t.get("shape", ())), str(t.get("dtype")))
            for t in report["tflite"].get(side, []) if isinstance(t, dict)]


def _said(signature: list[tuple[str, tuple[int, ...], str]]) -> str:
    return ", ".join(f"{n} {list(shape)} {dtype}" for n, shape, dtype in signature) or "none"


def _warnings(old: rm.Report, new: rm.Report, d: Mapping[str, Any]) -> list[str]:
    """What makes the comparison doubtful: two different pipelines or models, targets in one report only."""
    out = []
    if old.get("name") != new.get("name"):
        out.append(f"the reports are of different builds ({old.get('name')!r} and {new.get('name')!r})")
    for side in ("inputs", "outputs"):
        was, now = _signature(old, side), _signature(new, side)
        if was != now:
            out.append(f"the models have different {side} ({_said(was)} -> {_said(now)}): are they versions of the "
                       "same model?")
    for name in d["targets_removed"]:
        out.append(f"target {name} is checked in the old report only: the new build does not check it")
    for t in d["targets"]:
        if t["old_verdict"] is None:
            out.append(f"target {t['name']} is checked in the new report only: nothing to compare it with")
    return out


def regressions(d: Mapping[str, Any], gates: RegressionGates) -> list[str]:
    """The gates the change fails, each with the measured change."""
    reasons = []
    size = d["size"]
    if gates.max_size_growth is not None and size["delta"] is not None \
            and size["delta"] > gates.max_size_growth * size["old"]:
        reasons.append(f"model size grew {size['delta']:+,} bytes ({size['delta'] / size['old']:+.1%}: "
                       f"{size['old']:,} -> {size['new']:,}) > max_size_growth {gates.max_size_growth:.1%}")
    arena = d["arena"]
    if gates.max_arena_growth is not None and arena["delta"] is not None \
            and arena["delta"] > gates.max_arena_growth * arena["old"]:
        reasons.append(f"tensor arena estimate grew {arena['delta']:+,} bytes ({arena['delta'] / arena['old']:+.1%}"
                       f": {arena['old']:,} -> {arena['new']:,}) > max_arena_growth {gates.max_arena_growth:.1%}")
    acc = d["accuracy"]
    if gates.max_accuracy_regression is not None:
        if acc is None:
            reasons.append("max_accuracy_regression is set but a report has no accuracy (evaluation.labels)")
        elif -acc["delta"] > gates.max_accuracy_regression:
            reasons.append(f"accuracy fell {-acc['delta'] * 100:.2f} points ({acc['old']:.2%} -> {acc['new']:.2%}) > "
                           f"max_accuracy_regression {gates.max_accuracy_regression * 100:.2f} points")
    targets = {t["name"]: t for t in d["targets"]}
    for name in gates.no_new_fallback:
        t = targets.get(name)
        if t is None:
            reasons.append(f"no_new_fallback names {name!r}, which the new build does not check")
            continue
        for status in NOT_SUPPORTED:
            if t[f"new_{status}"]:
                ops = ", ".join(f"{op} x{n}" for op, n in t[f"new_{status}"].items())
                reasons.append(f"{name}: new {status} op(s) since the baseline: {ops}")
    return reasons


def diff_markdown(d: Mapping[str, Any], reasons: list[str] | None = None) -> list[str]:
    """The change for a person (a PR comment, the report's baseline section)."""
    size = d["size"]
    lines = [f"Model: {'unchanged' if d['same_model'] else 'changed'} ({md.code(d['old']['sha256'][:12])} -> "
             f"{md.code(d['new']['sha256'][:12])}); size {size['old']:,} -> {size['new']:,} bytes "
             f"({size['delta']:+,}); gate {md.text(d['gate']['old'].upper())} -> {md.text(d['gate']['new'].upper())}.",
             ""]
    warnings = d.get("warnings", [])
    if warnings:
        lines = [*(f"> **Warning:** {md.text(w)}" for w in warnings), "", *lines]
    if d["gate"].get("newly_failed"):
        lines.append(f"- checks that newly fail: {', '.join(md.code(c) for c in d['gate']['newly_failed'])}")
    if d["gate"].get("fixed"):
        lines.append(f"- checks that no longer fail: {', '.join(md.code(c) for c in d['gate']['fixed'])}")
    if d["ops"]["added"] or d["ops"]["removed"]:
        lines += [f"- ops added: {_counts(d['ops']['added'])}", f"- ops removed: {_counts(d['ops']['removed'])}"]
    if d["arena"]["delta"] is not None:
        lines.append(f"- tensor arena estimate: {d['arena']['old']:,} -> {d['arena']['new']:,} bytes "
                     f"({d['arena']['delta']:+,})")
    if d["accuracy"] is not None:
        a = d["accuracy"]
        lines.append(f"- accuracy (built): {a['old']:.2%} -> {a['new']:.2%} ({a['delta'] * 100:+.2f} points)")
    for name, per in d["parity"].items():
        s, t = per["sqnr_db"], per["top1_agreement"]
        sq = f"{s['old']:.1f} -> {s['new']:.1f} dB" if s["delta"] is not None else "-"
        top = f"{t['old']:.2%} -> {t['new']:.2%}" if t["delta"] is not None else "-"
        lines.append(f"- output {md.code(name)}: SQNR {sq}, top-1 agreement {top}")
    lines += ["", "| target | verdict | supported | cpu_fallback | unsupported | newly not supported | fixed |",
              "|---|---|---|---|---|---|---|"]
    for t in d["targets"]:
        oc, nc = t["old_counts"] or {}, t["new_counts"]
        cells = [f"{oc.get(k, '-')} -> {nc[k]}" for k in ("supported", "cpu_fallback", "unsupported")]  # integers
        new = _counts({**t["new_cpu_fallback"], **t["new_unsupported"]})
        fixed = _counts({**t["fixed_cpu_fallback"], **t["fixed_unsupported"]})
        lines.append(f"| {md.text(t['name'])} | {(t['old_verdict'] or '-').upper()} -> {t['new_verdict'].upper()} | "
                     f"{' | '.join(cells)} | {new} | {fixed} |")
    for name in d.get("targets_removed", []):
        lines.append(f"| {md.text(name)} | not checked any more | - | - | - | - | - |")
    if reasons is not None:
        lines += [""] + ([f"- **regression**: {md.text(r)}" for r in reasons] or ["No regression gate failed."])
    return [*lines, ""]


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{md.text(k)} x{v}" for k, v in counts.items()) or "-"


def against_baseline(body: rm.Report, baseline: rm.Report, checks: Sequence[verdict.Check],
                     gates: RegressionGates) -> rm.Report:
    """The report with what changed since the baseline report and the regression gates it fails; the
    comparison is made with the verdict before those gates."""
    changes = diff(baseline, body)
    failed = regressions(changes, gates)
    final = verdict.Verdict((*checks, *verdict.regression_checks(failed, gates.names)))
    out = body.copy()  # a new report: the one given stays as it was
    out["baseline"] = {"diff": changes, "regressions": failed}
    out["gate"] = final.to_json()
    return out
