"""JUnit renders the gate: a build that fails only a gate about a passing target is a failure (issue 15)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from edgeconv.ci import Outcome, junit_xml


def _report(reasons: list[str], verdict: str = "pass") -> dict[str, object]:
    target = {"name": "tflm-cmsis-nn", "verdict": verdict, "counts": {"supported": 3, "uncertain": 0,
                                                                     "cpu_fallback": 2, "unsupported": 0},
              "ops": []}
    return {"name": "m", "targets": [target], "gate": {"verdict": "fail" if reasons else "pass", "reasons": reasons}}


@pytest.mark.parametrize(("reasons", "failed_cases"), [
    ([], []),
    (["target tflm-cmsis-nn: 2 op(s) fall back to the CPU, more than gates.max_cpu_fallback_ops.tflm-cmsis-nn = 0"],
     ["target tflm-cmsis-nn"]),
    (["output 'digit': SQNR 12.0 dB < gates.min_sqnr_db 30"], ["gates"]),
])
def test_every_gate_reason_fails_a_test_case(reasons: list[str], failed_cases: list[str]) -> None:
    outcome = Outcome(Path("p.yaml"), 1 if reasons else 0, 1.0, _report(reasons))
    root = ET.fromstring(junit_xml([outcome]))
    failed = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    assert failed == failed_cases
    assert root.get("failures") == str(len(failed_cases))
    for case in root.iter("testcase"):
        failure = case.find("failure")
        if failure is not None:
            assert failure.get("message") == reasons[0]
