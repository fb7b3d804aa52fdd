"""Every gate at its limit, through the exit code the command line gives (not Verdict.exit_code, which the
CLI never calls): just inside, at, just outside. A flipped `<=` or `>=` in any gate fails here. No
TensorFlow: `check` and the build of an existing .tflite run the same target and memory gates.

The model: DeepLabV3 (MobileNetV2, depth 0.5), an Edge TPU oracle. On the Edge TPU 8 of its 72 ops fall
back to the CPU and 0.8287118886851702 of its MACs are mapped; 760,904 bytes; an estimated TFLite Micro
arena of 9,647,850 bytes."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from edgeconv.cli import main

from ..conftest import REPO

MODEL = REPO / "tests" / "data" / "oracles" / "edgetpu" / "deeplabv3_mnv2_dm05_pascal_quant.tflite"
FALLBACK, SHARE, FLASH, ARENA = 8, 0.8287118886851702, 760_904, 9_647_850
EPS = 1e-12


@pytest.mark.parametrize(("limit", "code"), [(FALLBACK + 1, 0), (FALLBACK, 0), (FALLBACK - 1, 1)])
def test_check_max_cpu_fallback(limit: int, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(MODEL), "--target", "edgetpu", "--max-cpu-fallback", str(limit)]) == code


@pytest.mark.parametrize(("limit", "code"), [(SHARE - EPS, 0), (SHARE, 0), (SHARE + EPS, 1)])
def test_check_min_mac_share(limit: float, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(MODEL), "--target", "edgetpu", "--min-mac-share", repr(limit)]) == code


# A CPU target's own gate (not the accelerator's): the Keras LSTM on arm-neon, 2 of 6 ops delegated to
# XNNPACK, 5/101 of the MACs (0.04950495049504951).
LSTM = REPO / "tests" / "data" / "oracles" / "edgetpu" / "keras_lstm_mnist_ptq.tflite"
LSTM_SHARE = 5 / 101


@pytest.mark.parametrize(("limit", "code"), [(LSTM_SHARE - EPS, 0), (LSTM_SHARE, 0), (LSTM_SHARE + EPS, 1)])
def test_check_min_mac_share_of_a_cpu_target(limit: float, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(LSTM), "--target", "arm-neon", "--min-mac-share", repr(limit)]) == code


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gates")
    shutil.copy(MODEL, root / "m.tflite")
    return root


def _build(project: Path, gates: str, monkeypatch: pytest.MonkeyPatch) -> int:
    (project / "p.yaml").write_text(f"version: 1\nmodel: {{path: m.tflite}}\ntargets: [edgetpu]\n"
                                    f"output: {{dir: out}}\ngates: {{{gates}}}\n")
    monkeypatch.chdir(project)
    return main(["build", "p.yaml", "--no-cache", "-q"])


@pytest.mark.parametrize(("gates", "code"), [
    (f"max_cpu_fallback_ops: {{edgetpu: {FALLBACK + 1}}}", 0),
    (f"max_cpu_fallback_ops: {{edgetpu: {FALLBACK}}}", 0),
    (f"max_cpu_fallback_ops: {{edgetpu: {FALLBACK - 1}}}", 1),
    (f"min_supported_mac_share: {{edgetpu: {SHARE - EPS!r}}}", 0),
    (f"min_supported_mac_share: {{edgetpu: {SHARE!r}}}", 0),
    (f"min_supported_mac_share: {{edgetpu: {SHARE + EPS!r}}}", 1),
    (f"max_flash_bytes: {FLASH + 1}", 0),
    (f"max_flash_bytes: {FLASH}", 0),
    (f"max_flash_bytes: {FLASH - 1}", 1),
    (f"max_arena_bytes: {ARENA + 1}", 0),
    (f"max_arena_bytes: {ARENA}", 0),
    (f"max_arena_bytes: {ARENA - 1}", 1),
])
def test_build_gates_at_their_limits(project: Path, gates: str, code: int, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert _build(project, gates, monkeypatch) == code, capsys.readouterr().err


# The agreement and accuracy gates are measured by parity (a TensorFlow build); their comparisons are the
# verdict's, and the build's exit code is 1 exactly when a check fails (tests/integration/test_strict_defaults).
MEASURED = {"sqnr_db": 20.5, "cosine": 0.995, "top1_agreement": 0.9125, "max_abs_error": 0.1,
            "mean_abs_error": 0.01}
PARITY = {"samples": 80, "outputs": {"digit": {"built": MEASURED}},
          "accuracy": {"output": "digit", "source": 0.9, "built": 0.8875, "drop": {"built": 0.0125}}}


@pytest.mark.parametrize(("gate", "measured", "check_id"), [
    ("min_sqnr_db", 20.5, "agreement.sqnr_db.digit"),
    ("min_cosine", 0.995, "agreement.cosine.digit"),
    ("min_top1_agreement", 0.9125, "agreement.top1.digit"),
])
@pytest.mark.parametrize(("offset", "fails"), [(-EPS, False), (0.0, False), (EPS, True)])
def test_agreement_gates_at_their_limits(gate: str, measured: float, check_id: str, offset: float,
                                         fails: bool) -> None:
    from edgeconv.verdict import Limits, Verdict, agreement_checks

    limits = Limits(**{"min_sqnr_db": None, "min_top1_agreement": None, "max_accuracy_drop": None,
                       gate: measured + offset})
    (check,) = agreement_checks(PARITY, limits)
    assert (check.id, check.outcome.fails) == (check_id, fails)
    assert Verdict((check,)).to_json()["verdict"] == ("fail" if fails else "pass")


TWO = {"samples": 80, "outputs": {"boxes": {"built": {**MEASURED, "sqnr_db": 18.2}},
                                   "scores": {"built": {**MEASURED, "sqnr_db": 20.0}}}, "accuracy": None}


@pytest.mark.parametrize(("offset", "fails"), [(-EPS, False), (0.0, False), (EPS, True)])
def test_a_per_output_gate_applies_to_its_output_only(offset: float, fails: bool) -> None:
    """gates.min_sqnr_db: {boxes: ...}: the boxes at their own limit, the scores still at the default 20 (and at
    it exactly: pass); the failing sentence names the per-output key."""
    from edgeconv.verdict import Limits, agreement_checks

    limits = Limits(min_top1_agreement=None, max_accuracy_drop=None,
                    per_output={"min_sqnr_db": {"boxes": 18.2 + offset}})
    boxes, scores = agreement_checks(TWO, limits)
    assert (boxes.id, boxes.outcome.fails, boxes.limit) == ("agreement.sqnr_db.boxes", fails, 18.2 + offset)
    assert (scores.id, scores.outcome.fails, scores.limit) == ("agreement.sqnr_db.scores", False, 20.0)
    if fails:
        assert boxes.sentence == (f"output 'boxes': SQNR 18.2 dB < gates.min_sqnr_db.boxes {18.2 + offset:g} (on the "
                                  "evaluation samples)")


@pytest.mark.parametrize(("offset", "fails"), [(-EPS, False), (0.0, False), (EPS, True)])
def test_an_output_not_named_keeps_the_default(offset: float, fails: bool) -> None:
    from edgeconv.verdict import Limits, agreement_checks

    limits = Limits(min_sqnr_db=20.0 + offset, min_top1_agreement=None, max_accuracy_drop=None,
                    per_output={"min_sqnr_db": {"boxes": 15.0}})
    _, scores = agreement_checks(TWO, limits)
    assert scores.outcome.fails is fails


@pytest.mark.parametrize(("offset", "fails"), [(EPS, False), (0.0, False), (-EPS, True)])
def test_accuracy_drop_gate_at_its_limit(offset: float, fails: bool) -> None:
    from edgeconv.verdict import Limits, agreement_checks

    limits = Limits(min_sqnr_db=None, min_top1_agreement=None, max_accuracy_drop=0.0125 + offset)
    (check,) = agreement_checks(PARITY, limits)
    assert (check.id, check.outcome.fails) == ("accuracy.drop", fails)


# The regression gates of `edgeconv diff` (and `build --baseline`, which calls the same function): growth
# and fall compared with the limit times the baseline, at exactly representable values.
REPORT = json.loads((REPO / "tests" / "data" / "reports" / "digits.report.json").read_text())


def _report(path: Path, size: int, arena: int, accuracy: float) -> Path:
    r = copy.deepcopy(REPORT)
    r["tflite"]["bytes"], r["memory"]["arena_bytes"] = size, arena
    r["parity"]["accuracy"]["built"] = accuracy
    path.write_text(json.dumps(r))
    return path


@pytest.mark.parametrize(("flag", "new", "limit", "code"), [
    ("--max-size-growth", (32_768 + 4_095, 16_384, 0.75), "0.125", 0),
    ("--max-size-growth", (32_768 + 4_096, 16_384, 0.75), "0.125", 0),
    ("--max-size-growth", (32_768 + 4_097, 16_384, 0.75), "0.125", 1),
    ("--max-arena-growth", (32_768, 16_384 + 4_095, 0.75), "0.25", 0),
    ("--max-arena-growth", (32_768, 16_384 + 4_096, 0.75), "0.25", 0),
    ("--max-arena-growth", (32_768, 16_384 + 4_097, 0.75), "0.25", 1),
    ("--max-accuracy-regression", (32_768, 16_384, 0.625), "0.125000001", 0),
    ("--max-accuracy-regression", (32_768, 16_384, 0.625), "0.125", 0),
    ("--max-accuracy-regression", (32_768, 16_384, 0.625), "0.124999999", 1),
])
def test_diff_regression_gates_at_their_limits(tmp_path: Path, flag: str, new: tuple[int, int, float], limit: str,
                                               code: int, capsys: pytest.CaptureFixture[str]) -> None:
    old = _report(tmp_path / "old.json", 32_768, 16_384, 0.75)
    assert main(["diff", str(old), str(_report(tmp_path / "new.json", *new)), flag, limit]) == code


# The conversion checks: the passes' proof (verify.pass_tolerance) and the float ONNX model
# (verify.float_tolerance), at their tolerance.
@pytest.mark.parametrize(("diff", "passed"), [(2**-18 - 2**-30, True), (2**-18, True), (2**-18 + 2**-30, False)])
def test_the_passes_proof_at_its_tolerance(diff: float, passed: bool) -> None:
    from edgeconv import verdict
    from edgeconv.gates import Limits
    from edgeconv.verify.equivalence import proof

    found = proof({"a": diff / 2, "b": diff}, 2**-18, 8, "calibration")
    assert (found["passed"], found["max_abs_diff"]) == (passed, diff)
    (check,) = [c for c in verdict.conversion_checks(Limits(), found, [], True) if c.id == "conversion.passes"]
    assert check.outcome is (verdict.Outcome.PASS if passed else verdict.Outcome.FAIL)


@pytest.mark.parametrize(("worst", "outcome"), [(2**-10 - 2**-30, "pass"), (2**-10, "pass"),
                                                 (2**-10 + 2**-30, "fail")])
def test_the_float_onnx_check_at_its_tolerance(worst: float, outcome: str) -> None:
    from edgeconv import verdict

    assert verdict.onnx_float_check(worst, 2**-10).outcome.value == outcome


# The activation-range finding: more than 0.1 % of a tensor's values clipped (plus what percentile ranges
# clip by design).
@pytest.mark.parametrize(("out", "n", "percentile", "found"), [
    (999, 1_000_000, None, False), (1_000, 1_000_000, None, False), (1_001, 1_000_000, None, True),
    (20_999, 1_000_000, 99.0, False), (21_000, 1_000_000, 99.0, False), (21_001, 1_000_000, 99.0, True),
])
def test_activation_clipping_at_its_limit(out: int, n: int, percentile: float | None, found: bool) -> None:
    from edgeconv.calibration.checks import clipping

    assert clipping({"t": (float(out), float(n))}, percentile) == ([(out / n, "t")] if found else [])


# Detection boxes: each built box's IoU with the source model's.
@pytest.mark.parametrize(("a", "b", "iou"), [
    ([0, 0, 2, 2], [0, 0, 2, 2], 1.0),
    ([0, 0, 2, 2], [1, 0, 3, 2], 1 / 3),  # half of each overlaps: 2 / (4 + 4 - 2)
    ([0, 0, 2, 2], [2, 2, 4, 4], 0.0),  # touching corners
    ([2, 2, 0, 0], [0, 0, 2, 2], 1.0),  # corners in the other order: the same box
    ([1, 1, 1, 1], [1, 1, 1, 1], 1.0),  # two empty boxes at one place agree
    ([1, 1, 1, 1], [2, 2, 2, 2], 0.0),
])
def test_box_iou(a: list[float], b: list[float], iou: float) -> None:
    import numpy as np

    from edgeconv.verify.parity import box_iou

    assert box_iou(np.array([a], float), np.array([b], float)) == pytest.approx([iou])


def test_a_boxes_output_reports_its_mean_iou_and_no_top1() -> None:
    import numpy as np

    from edgeconv.verify.parity import measure

    want = np.array([[[0, 0, 2, 2], [0, 0, 1, 1]]], np.float32)  # one sample, two boxes
    got = np.array([[[1, 0, 3, 2], [0, 0, 1, 1]]], np.float32)
    parity = measure(lambda f: {"boxes": want}, {"built": lambda f: {"boxes": got}}, [{"x": np.zeros(1)}],
                     {"boxes": (1, 2, 4)}, None, {"boxes": "boxes"})
    m = parity["outputs"]["boxes"]["built"]
    assert m["mean_iou"] == pytest.approx((1 / 3 + 1) / 2) and m["top1_agreement"] is None
    assert parity["kinds"] == {"boxes": "boxes"}


# gates.max_runtime_drift_lsb: a runtime at most N LSB from the reference passes; one that could not be compared
# fails (it proves nothing).
DRIFT = {"samples": 4, "data": "evaluation", "runtimes": {
    "builtin": {"target": "generic-int8", "max_lsb": 1, "tensors_compared": 60,
                "ops": [{"op": 12, "type": "MEAN", "tensor": "pool", "max_lsb": 1, "differ": 0.0125}]},
    "tflm": {"target": "tflm-cmsis-nn", "error": "RuntimeError: op not registered"}}}


@pytest.mark.parametrize(("limit", "fails"), [(2, False), (1, False), (0, True)])
def test_runtime_drift_gate_at_its_limit(limit: int, fails: bool) -> None:
    from edgeconv.verdict import Limits, drift_checks

    builtin, tflm = drift_checks(DRIFT, Limits(max_runtime_drift_lsb=limit))
    assert (builtin.id, builtin.outcome.fails, builtin.target) == ("drift.builtin", fails, "generic-int8")
    assert tflm.outcome.fails and tflm.sentence.startswith("runtime tflm: not compared with the reference (")
    if fails:
        assert builtin.sentence == ("runtime builtin (generic-int8): at most 1 LSB from the reference on 60 op "
                                    "output(s) > gates.max_runtime_drift_lsb 0; first at op #12 MEAN (1 LSB on 1.25% "
                                    "of its values)")
    assert drift_checks(DRIFT, Limits()) == []  # off by default
