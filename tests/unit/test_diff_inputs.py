"""`edgeconv diff` checks its inputs: a report with missing sections, wrong types or another schema
version is exit 2 naming the problem, never a crash or a silent "no regression" (issue 17)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from edgeconv.cli import main

GOOD: dict[str, Any] = {
    "schema_version": 1, "name": "m",
    "tflite": {"op_types": {"CONV_2D": 1}, "sha256": "a" * 64, "bytes": 100},
    "gate": {"verdict": "pass", "reasons": [], "checks": []},
    "targets": [{"name": "arm-neon", "verdict": "pass", "counts": {"supported": 1, "cpu_fallback": 0,
                                                                    "unsupported": 0}, "ops": []}],
    "memory": None, "parity": None,
}


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
    ("tflite.op_types", KeyError, "not a valid edgeconv report: tflite.op_types is missing or not a dict"),
    ("tflite.bytes", "100", "not a valid edgeconv report: tflite.bytes is missing or not a int"),
    ("gate", KeyError, "not a valid edgeconv report: gate.verdict is missing or not pass/fail"),
    ("targets.0.ops", None, "not a valid edgeconv report: targets[0] lacks name, counts or ops"),
    ("memory", [], "not a valid edgeconv report: memory is not a mapping"),
    ("targets.0.counts", {"supported": 1}, "not a valid edgeconv report: targets[0].counts lacks supported, "
                                           "cpu_fallback or unsupported"),
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
