"""One verdict, rendered the same way by every output (issue 15): a failing check of each kind is a
failure in the exit code, the console, report.md, JUnit, the Markdown summary, the GitHub annotations
and `edgeconv diff`; none of them decides anything itself."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from edgeconv import verdict
from edgeconv.ci import Outcome, junit_xml, summary_markdown, workflow_commands
from edgeconv.diff import diff, diff_markdown
from edgeconv.report import console_lines, to_markdown
from edgeconv.verdict import Check, Kind

PASSING = [Check("target.arm-neon", Kind.TARGET, verdict.Outcome.PASS, "target arm-neon: every op runs",
                 0, 0, "arm-neon")]
FAILING = {
    Kind.TARGET: Check("target.arm-neon", Kind.TARGET, verdict.Outcome.FAIL,
                       "target arm-neon: 1 unsupported op(s): CUSTOM:FlexErf x1", 1, 0, "arm-neon"),
    Kind.ACCELERATOR: Check("accelerator.edgetpu", Kind.ACCELERATOR, verdict.Outcome.FAIL,
                            "edgetpu: 1 of 732 ops (0.0% of MACs) on the Edge TPU; less than the 50% of MACs", 0.0,
                            0.5, "edgetpu"),
    Kind.GATE: Check("gate.max_cpu_fallback_ops.tflm-cmsis-nn", Kind.GATE, verdict.Outcome.FAIL,
                     "target tflm-cmsis-nn: 2 op(s) fall back to the CPU, more than "
                     "gates.max_cpu_fallback_ops.tflm-cmsis-nn = 0", 2, 0, "tflm-cmsis-nn"),
    Kind.CALIBRATION: Check("calibration.range_mismatch.image", Kind.CALIBRATION, verdict.Outcome.FAIL,
                            "calibration: input 'image': calibration range [0, 255] is 255x wider than the "
                            "evaluation range [0, 1]"),
    Kind.AGREEMENT: Check("agreement.sqnr_db.tags", Kind.AGREEMENT, verdict.Outcome.FAIL,
                          "output 'tags': SQNR 6.1 dB < gates.min_sqnr_db 20 (on the evaluation samples)", 6.1, 20.0),
    Kind.ACCURACY: Check("accuracy.drop", Kind.ACCURACY, verdict.Outcome.FAIL,
                         "accuracy drop 84.00 points (100.00% -> 16.00%) > gates.max_accuracy_drop 3.00 points",
                         0.84, 0.03),
    Kind.CONVERSION: Check("conversion.passes", Kind.CONVERSION, verdict.Outcome.FAIL,
                           "the passes changed the outputs: max abs difference 0.5 > verify.pass_tolerance 1e-05",
                           0.5, 1e-5),
    Kind.RUNTIME: Check("runtime.invoke", Kind.RUNTIME, verdict.Outcome.FAIL,
                        "the built model fails to run on 3 of 200 samples at op #4 DIV: div.cc:262 data[i] != "
                        "zero_point was not true. Likely fix: add a small epsilon", 3, 0),
    Kind.MEMORY: Check("memory.arena_bytes", Kind.MEMORY, verdict.Outcome.FAIL,
                       "estimated tensor arena 9,000 bytes > gates.max_arena_bytes 8,000", 9000, 8000),
    Kind.REGRESSION: Check("regression.0", Kind.REGRESSION, verdict.Outcome.FAIL,
                           "regression since the baseline: model size grew +100 bytes"),
}


def report(checks: list[Check]) -> dict[str, Any]:
    target = {"name": "arm-neon", "title": "t", "verdict": "pass", "counts": {"supported": 1, "uncertain": 0,
              "cpu_fallback": 0, "unsupported": 0}, "macs": {}, "shares": {"ops": 1.0, "macs": 1.0}, "warnings": 0,
              "weight_bytes": 0, "ops": []}
    return {"name": "m", "targets": [target], "gate": verdict.Verdict(tuple(checks)).to_json(),
            "tflite": {"bytes": 100, "sha256": "a" * 64, "op_types": {}},
            "model": {"path": "m.keras", "format": "keras"},
            "artifacts": {"tflite": {"path": "m.tflite", "bytes": 100}}, "quantization": None, "passes": [],
            "equivalence": None, "memory": {"arena_bytes": 9000, "flash_bytes": 100, "activations_bytes": 8000,
                                                    "bookkeeping_bytes": 200, "margin": 0.25, "method": "m"}}


@pytest.mark.parametrize("kind", list(Kind), ids=[k.value for k in Kind])
def test_a_failing_check_of_every_kind_fails_every_output(kind: Kind) -> None:
    failing = FAILING[kind]
    body = report([*PASSING, failing])
    gate = verdict.Verdict.from_json(body["gate"])
    assert gate.exit_code == 1 and [c.id for c in gate.failed] == [failing.id]
    assert body["gate"]["verdict"] == "fail" and body["gate"]["reasons"] == [failing.sentence]

    console = console_lines(body)
    assert "gate: FAIL" in console and f"  - {failing.sentence}" in console
    assert f"- {failing.sentence}" in to_markdown(body).splitlines()
    outcome = Outcome(Path("p.yaml"), gate.exit_code, 1.0, body)
    root = ET.fromstring(junit_xml([outcome]))
    assert root.get("failures") == "1"
    (failure,) = list(root.iter("failure"))
    assert failure.get("message") == failing.sentence and failure.get("type") == kind.value
    summary = summary_markdown([outcome])
    assert summary.startswith("## edgeconv: FAIL") and failing.sentence in summary
    annotations = [line for line in workflow_commands([outcome]) if line.startswith("::error")]
    assert len(annotations) == 1 and annotations[0].endswith(failing.sentence.replace("%", "%25"))
    changes = diff(report(PASSING), body)
    assert changes["gate"] == {"old": "pass", "new": "fail", "newly_failed": [failing.id], "fixed": []}
    assert f"- checks that newly fail: `{failing.id}`" in diff_markdown(changes)


def test_a_passing_build_passes_every_output() -> None:
    body = report(PASSING)
    outcome = Outcome(Path("p.yaml"), 0, 1.0, body)
    assert verdict.Verdict.from_json(body["gate"]).exit_code == 0
    assert "gate: PASS" in console_lines(body)
    assert ET.fromstring(junit_xml([outcome])).get("failures") == "0"
    assert summary_markdown([outcome]).startswith("## edgeconv: PASS")
    assert not [line for line in workflow_commands([outcome]) if line.startswith("::error")]


def test_a_loosened_default_gate_is_said_everywhere_and_never_fails() -> None:
    note = "default gate 'accuracy' disabled in p.yaml line 14 (gates.disable)"
    body = report([*PASSING, verdict.off("0", note)])
    assert body["gate"] == {**body["gate"], "verdict": "pass", "disabled": [note]}
    assert f"loosened: {note}" in console_lines(body)
    assert f"- **loosened**: {note}" in to_markdown(body).splitlines()
    outcome = Outcome(Path("p.yaml"), 0, 1.0, body)
    root = ET.fromstring(junit_xml([outcome]))
    assert [s.get("message") for s in root.iter("skipped")] == [note]
    assert note in summary_markdown([outcome])
    assert any(line.startswith("::notice") and line.endswith(note) for line in workflow_commands([outcome]))


def test_a_warning_is_annotated_but_does_not_fail() -> None:
    warning = Check("calibration.min_samples", Kind.CALIBRATION, verdict.Outcome.WARN, "calibration: 10 samples")
    body = report([*PASSING, warning])
    assert body["gate"]["verdict"] == "pass"
    assert any(line.startswith("::warning") for line in workflow_commands([Outcome(Path("p.yaml"), 0, 1.0, body)]))


def test_the_console_gives_each_stage_time_before_the_verdict() -> None:
    body = {**report(PASSING), "timings": {"stages_s": {"load": 7.06, "convert": 1.84, "verify": 0.8},
                                           "total_s": 9.71}}
    lines = console_lines(body)
    assert lines[lines.index("gate: PASS") - 1] == "time: load 7.1 s, convert 1.8 s, verify 0.8 s (total 9.7 s)"
    assert not [line for line in console_lines(report(PASSING)) if line.startswith("time:")]  # a cached .tflite check


def _parity(sqnr: float, cosine: float, top1: float, drop: float) -> dict[str, Any]:
    return {"data": "evaluation", "outputs": {"p": {"built": {"sqnr_db": sqnr, "cosine": cosine,
                                                             "top1_agreement": top1}}},
            "accuracy": {"source": 0.9, "built": 0.9 - drop, "drop": {"built": drop}}}


@pytest.mark.parametrize(("limit", "at", "outside", "check_id"), [
    # A minimum passes at the limit and fails just below it; a maximum passes at it and fails just above.
    ("min_sqnr_db", 20.0, 19.999, "agreement.sqnr_db.p"),
    ("min_cosine", 0.99, 0.98999, "agreement.cosine.p"),
    ("min_top1_agreement", 0.9, 0.8999, "agreement.top1.p"),
    ("max_accuracy_drop", 0.03, 0.03001, "accuracy.drop"),
])
def test_every_agreement_gate_at_its_boundary(limit: str, at: float, outside: float, check_id: str) -> None:
    good = {"min_sqnr_db": 40.0, "min_cosine": 1.0, "min_top1_agreement": 1.0, "max_accuracy_drop": 0.0}
    limits = verdict.Limits(min_sqnr_db=20.0, min_cosine=0.99, min_top1_agreement=0.9, max_accuracy_drop=0.03)
    names = {"min_sqnr_db": "sqnr", "min_cosine": "cosine", "min_top1_agreement": "top1", "max_accuracy_drop": "drop"}
    for value, outcome in ((at, verdict.Outcome.PASS), (outside, verdict.Outcome.FAIL)):
        measured = {names[k]: (value if k == limit else v) for k, v in good.items()}
        checks = {c.id: c for c in verdict.agreement_checks(_parity(**measured), limits)}
        assert checks[check_id].outcome is outcome, (limit, value)
        assert [c.id for c in checks.values() if c.outcome.fails] == ([] if outcome is verdict.Outcome.PASS
                                                                       else [check_id])


@pytest.mark.parametrize(("limit", "key", "check_id"), [
    ("max_arena_bytes", "arena_bytes", "memory.arena_bytes"),
    ("max_flash_bytes", "flash_bytes", "memory.flash_bytes"),
])
def test_every_memory_gate_at_its_boundary(limit: str, key: str, check_id: str) -> None:
    limits = verdict.Limits(**{limit: 10_000})
    for value, fails in ((10_000, False), (10_001, True)):
        memory = {"arena_bytes": 0, "flash_bytes": 0, key: value}
        (check,) = verdict.memory_checks(memory, limits)
        assert (check.id, check.outcome.fails) == (check_id, fails)


@pytest.mark.parametrize(("outcome", "fails"), [("pass", False), ("fail", True), ("error", True), ("warn", False),
                                                ("off", False)])
def test_which_outcomes_fail_is_the_verdicts(outcome: str, fails: bool) -> None:
    """ci.py, diff.py and report.py ask verdict.fails; none restates the list."""
    assert verdict.fails(outcome) is fails
    assert {"fail", "error"} == verdict.FAILING


@pytest.mark.parametrize(("target_verdict", "gate_outcome", "passes"), [
    ("pass", "pass", True), ("pass", "fail", False), ("fail", "pass", False), ("pass", "error", False)])
def test_a_target_passes_only_with_every_check_made_on_it(target_verdict: str, gate_outcome: str,
                                                          passes: bool) -> None:
    target = {"name": "edgetpu", "verdict": target_verdict}
    checks = [{"target": "edgetpu", "outcome": gate_outcome}, {"target": "arm-neon", "outcome": "fail"}]
    assert verdict.target_passes(target, checks) is passes


CAUSE = {"rank": 1, "id": "input_resolution", "confirmed": True, "subject": "x", "source_layers": [],
         "sentence": "input 'x': one int8 scale (6.588): 12 of 13 features span fewer than 16 levels",
         "fix": "scale the features to similar ranges", "evidence": {}}


def test_the_first_cause_of_a_failure_is_said_in_every_output() -> None:
    body = report([*PASSING, FAILING[Kind.AGREEMENT]])
    body["diagnosis"] = {"failed": ["agreement.sqnr_db.tags"], "causes": [CAUSE, {**CAUSE, "rank": 2}]}
    line = ("cause (input_resolution): input 'x': one int8 scale (6.588): 12 of 13 features span fewer than 16 "
            "levels; fix: scale the features to similar ranges (1 more in report.md)")
    console = console_lines(body)
    assert console[console.index("gate: FAIL") + 2] == f"  {line}"
    md = to_markdown(body)
    assert "| 1 | `input_resolution` | yes | input 'x': one int8 scale (6.588): 12 of 13 features span fewer" in md
    outcome = Outcome(Path("p.yaml"), 1, 1.0, body)
    assert f"- `p.yaml` (m): {line}" in summary_markdown([outcome]).splitlines()
    assert f"::error file=p.yaml,title=edgeconv diagnosis (m)::{line}" in workflow_commands([outcome])


def test_a_repair_that_changes_the_interface_is_a_warning_said_in_every_output() -> None:
    summary = ("repair: trial 1 of 1 passes every gate: keep the ops that read input 'x' in float (SUB, MUL); it "
               "CHANGES THE MODEL'S INTERFACE (input int8 -> float32, output int8 -> float32): firmware must feed "
               "and read those types; the output is built with it (add it to p.yaml: report.md shows the snippet)")
    found = {"trials": [{"trial": 1, "interface_change": "input int8 -> float32, output int8 -> float32"}],
             "chosen": 1, "summary": summary}
    check = verdict.repair_check(found, 12)
    body = report([*PASSING, check])
    body["repair"] = {**found, "snippet": "quantization: {}", "stopped": "", "closest": None, "skipped": []}
    assert body["gate"]["verdict"] == "pass" and check.outcome is verdict.Outcome.WARN
    assert summary in console_lines(body)
    outcome = Outcome(Path("p.yaml"), 0, 1.0, body)
    assert f"- `p.yaml` (m): {summary}" in summary_markdown([outcome]).splitlines()
    assert any(line.startswith("::warning") and line.endswith(summary) for line in workflow_commands([outcome]))


def test_junit_stays_valid_xml_when_a_check_quotes_control_characters() -> None:
    """A sentence can quote what a model or data file holds (a tensor name with a terminal escape, a form feed):
    XML 1.0 allows none of those, ElementTree writes them as they are, and a JUnit reader then refuses the
    whole file. They are written as U+FFFD; the verdict (failures, the message's words) is unchanged."""
    hostile = Check("agreement.sqnr_db.o\x1b[31m", Kind.AGREEMENT, verdict.Outcome.FAIL,
                    "output 'o\x1b[31m\x0c\x00': SQNR 6.1 dB < gates.min_sqnr_db 20 (on the evaluation samples)",
                    6.1, 20.0)
    body = report([*PASSING, hostile])
    root = ET.fromstring(junit_xml([Outcome(Path("p.yaml"), 1, 1.0, body)]))
    (failure,) = list(root.iter("failure"))
    assert root.get("failures") == "1"
    assert failure.get("message") == ("output 'o\ufffd[31m\ufffd\ufffd': SQNR 6.1 dB < gates.min_sqnr_db 20 (on the "
                                      "evaluation samples)")
    assert [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None] == [
        "agreement.sqnr_db.o\ufffd[31m"]


def _op(index: int, kind: str, status: str = "unsupported", layers: tuple[str, ...] = ()) -> dict[str, Any]:
    found = [{"rule": f"generic-int8.{kind}.op_listed", "detail": f"{kind} detail", "fix": f"{kind} fix"}]
    return {"index": index, "type": kind, "status": status, "violations": found if status != "supported" else [],
            "source_layers": list(layers)}


@pytest.mark.parametrize(("ops", "line"), [
    # A float island: the op between the QUANTIZE and DEQUANTIZE is where it stops, with its layer.
    ([_op(0, "CONV_2D", "supported"), _op(1, "DEQUANTIZE"), _op(2, "ELU", layers=("elu",)), _op(3, "QUANTIZE")],
     "first unsupported op #2 ELU (layer 'elu'): ELU detail; fix: ELU fix (2 more op types in report.md)"),
    ([_op(4, "NEG", layers=("ln", "gn")), _op(7, "NEG")],
     "first unsupported op #4 NEG (layer 'ln', 'gn'): NEG detail; fix: NEG fix"),
    ([_op(5, "DEQUANTIZE")], "first unsupported op #5 DEQUANTIZE: DEQUANTIZE detail; fix: DEQUANTIZE fix"),
    ([_op(0, "SOFTMAX", "cpu_fallback")], None),
    ([], None),
])
def test_a_failing_target_says_where_it_stops(ops: list[dict[str, Any]], line: str | None) -> None:
    from edgeconv.report import first_unsupported

    assert first_unsupported({"name": "generic-int8", "ops": ops}) == line


def test_the_console_says_where_a_target_stops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under a failing target's line, its first unsupported op that is not a float island's edge, with the
    rule's finding and fix: what a CI log shows without opening report.md."""
    import shutil

    from edgeconv.cli import main

    from ..conftest import REPO

    shutil.copy(REPO / "tests" / "data" / "sin-island.int8.tflite", tmp_path / "m.tflite")
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: m.tflite}\ntargets: [generic-int8, arm-neon]\n")
    assert main(["build", str(tmp_path / "p.yaml")]) == 1
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("generic-int8: FAIL (2 supported, 0 cpu_fallback, 3 unsupported)")
    assert lines[at + 1] == ("  first unsupported op #2 SIN: SIN has no entry in the generic-int8 op table; fix: "
                             "Replace the op with one that has an int8 kernel, or move it out of the model (pre-/"
                             "post-processing on the host). (2 more op types in report.md)")
    assert lines[at + 2] == "arm-neon: PASS (5 supported, 0 cpu_fallback, 0 unsupported)"
