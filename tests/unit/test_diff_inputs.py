"""`edgeconv diff` checks its inputs: a report with missing sections, wrong types or another schema
version is exit 2 naming the problem, never a crash or a silent "no regression" (issue 17)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from edgeconv.cli import main

from ..conftest import REPO

# A real report (the shipped example, built by this edgeconv), as one build: named m, checked on arm-neon.
REAL: dict[str, Any] = json.loads((REPO / "tests" / "data" / "reports" / "digits.report.json").read_text())
GOOD: dict[str, Any] = {**REAL, "name": "m", "targets": [t for t in REAL["targets"] if t["name"] == "arm-neon"]}


def _set(report: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(report)
    *parents, last = path.split(".")
    node: Any = out
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return out


@pytest.mark.parametrize(("path", "value", "problem"), [
    ("schema_version", 99, "report schema_version 99 is not one this edgeconv reads (1); compare reports of the "
                           "same edgeconv release"),
    ("schema_version", True, "not a valid edgeconv report: $.schema_version: expected a positive integer, got True"),
    ("schema_version", 0, "not a valid edgeconv report: $.schema_version: expected a positive integer, got 0"),
    ("schema_version", "1", "not a valid edgeconv report: $.schema_version: expected a positive integer, got '1'"),
    ("tflite.op_types", KeyError, "not a valid edgeconv report: $.tflite: missing 'op_types'"),
    ("tflite.bytes", "100", "not a valid edgeconv report: $.tflite.bytes: expected an integer, got a string"),
    ("tflite.inputs", None, "not a valid edgeconv report: $.tflite.inputs: expected an array, got null"),
    ("gate", KeyError, "not a valid edgeconv report: $: missing 'gate'"),
    ("gate.checks", {}, "not a valid edgeconv report: $.gate.checks: expected an array, got an object"),
    ("targets.0.ops", None, "not a valid edgeconv report: $.targets[0].ops: expected an array, got null"),
    ("memory", [], "not a valid edgeconv report: $.memory: expected an object, got an array"),
    ("memory.arena_bytes", "10800", "not a valid edgeconv report: $.memory.arena_bytes: expected an integer, "
                                    "got a string"),
    ("parity.outputs", [], "not a valid edgeconv report: $.parity.outputs: expected an object, got an array"),
    ("targets.0.counts", {"supported": 1}, "not a valid edgeconv report: $.targets[0].counts: missing "
                                           "'cpu_fallback'"),
])
def test_a_bad_report_is_exit_2_naming_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str,
                                                   value: Any, problem: str) -> None:
    (tmp_path / "old.json").write_text(json.dumps(GOOD))
    (tmp_path / "new.json").write_text(json.dumps(_set(GOOD, path, value)))
    assert main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith(f"new.json: {problem}")


def test_two_good_reports_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("old", "new"):
        (tmp_path / f"{name}.json").write_text(json.dumps(GOOD))
    assert main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0
    assert "gate PASS -> PASS" in capsys.readouterr().out


def _diff(tmp_path: Path, old: dict[str, Any], new: dict[str, Any], *extra: str) -> int:
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    return main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"), *extra])


IO = {"inputs": [{**REAL["tflite"]["inputs"][0], "shape": [1, 8, 8, 1]}], "outputs": REAL["tflite"]["outputs"]}


@pytest.mark.parametrize(("change", "warning"), [
    (lambda r: _set(r, "name", "kws"), "the reports are of different builds ('m' and 'kws')"),
    (lambda r: _set(r, "tflite.inputs.0.shape", [1, 49, 10, 1]),
     "the models have different inputs (image [1, 8, 8, 1] int8 -> image [1, 49, 10, 1] int8): are they versions of "
     "the same model?"),
    (lambda r: _set(r, "targets", []),
     "target arm-neon is checked in the old report only: the new build does not check it"),
    (lambda r: _set(r, "targets.0.name", "edgetpu"),
     "target edgetpu is checked in the new report only: nothing to compare it with"),
])
def test_a_doubtful_comparison_is_said_first(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any,
                                             warning: str) -> None:
    old = {**GOOD, "tflite": {**GOOD["tflite"], **IO}}
    code = _diff(tmp_path, old, change(old))
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("> **Warning:** ")  # said before anything else
    assert f"> **Warning:** {warning}" in out.splitlines()
    assert main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--format", "json"]) == 0
    assert warning in json.loads(capsys.readouterr().out)["warnings"]


def test_the_same_build_compared_has_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = {**GOOD, "tflite": {**GOOD["tflite"], **IO}}
    _diff(tmp_path, old, old)
    assert "Warning" not in capsys.readouterr().out


def test_a_target_no_longer_checked_keeps_its_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _diff(tmp_path, GOOD, _set(GOOD, "targets", []))
    assert "| arm-neon | not checked any more | - | - | - | - | - |" in capsys.readouterr().out


@pytest.mark.parametrize(("old_acc", "new_acc", "limit", "code", "line"), [
    (0.9889, 0.9767, "0.0125", 0, "- accuracy (built): 98.89% -> 97.67% (-1.22 points)"),
    (0.9889, 0.9767, "0.0121", 1, "- **regression**: accuracy fell 1.22 points (98.89% -> 97.67%) > "
                                  "max_accuracy_regression 1.21 points"),
])
def test_an_accuracy_change_is_in_points(tmp_path: Path, capsys: pytest.CaptureFixture[str], old_acc: float,
                                         new_acc: float, limit: str, code: int, line: str) -> None:
    def with_accuracy(value: float) -> dict[str, Any]:
        parity = copy.deepcopy(GOOD["parity"])
        parity["accuracy"].update(source=0.99, built=value)
        return {**GOOD, "parity": parity}

    got = _diff(tmp_path, with_accuracy(old_acc), with_accuracy(new_acc), "--max-accuracy-regression", limit)
    assert got == code
    assert line in capsys.readouterr().out.splitlines()


def test_a_target_whose_gate_fails_is_shown_failing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Edge TPU's accelerator check failing in the new report: the target row says PASS -> FAIL (it said
    PASS -> PASS beside a newly failing accelerator.edgetpu), from verdict.target_passes."""
    new = copy.deepcopy(REAL)
    (check,) = [c for c in new["gate"]["checks"] if c["id"] == "accelerator.edgetpu"]
    check["outcome"] = "fail"
    new["gate"]["verdict"] = "fail"
    assert _diff(tmp_path, REAL, new) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| edgetpu |")]
    assert len(rows) == 1 and rows[0].startswith("| edgetpu | PASS -> FAIL |")
