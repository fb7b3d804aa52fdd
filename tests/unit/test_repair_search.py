"""The repair search's choices and bookkeeping (issue 19), and its configuration. The trials here are
scripted outcomes; tests/integration/test_repair.py runs the search on real conversions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from edgeconv.config import QuantMode, load_pipeline
from edgeconv.errors import ConfigError
from edgeconv.verify import repair

from .test_config import MINIMAL, problems, project, write  # noqa: F401  (project is a fixture)

RANKED = [{"tensor": "net/mix/MatMul", "source_layers": ["mix"], "model_output": False},
          {"tensor": "net/head/MatMul", "source_layers": ["head"], "model_output": False},
          {"tensor": "Identity", "source_layers": [], "model_output": True}]


def _config(project: Path, extra: str = "") -> Any:
    (project / "eval.npz").write_bytes(b"PK")
    return load_pipeline(write(project, MINIMAL + "evaluation: {path: eval.npz}\n" + extra))


def test_candidates_come_cheapest_first_and_say_why_others_do_not_apply(project: Path) -> None:
    config = _config(project, "quantization: {per_channel: false}\n")
    cands, skipped = repair.candidates(config, no_float=[], no_int16=[], available=500, used=200, ranked=RANKED,
                                       max_keep_float=2)
    assert [c.what for c in cands] == [
        "per-channel weights", "400 calibration samples instead of 200",
        "activation ranges at the 99.99th percentile of the calibration values (AI Edge Quantizer)",
        "activation ranges at the 99.9th percentile of the calibration values (AI Edge Quantizer)",
        "int16 activations for the 1 op(s) adding the most error (mix; AI Edge Quantizer)",
        "int16 activations for the 2 op(s) adding the most error (head, mix; AI Edge Quantizer)",
        "keep the 1 op(s) adding the most error in float (mix)",
        "keep the 2 op(s) adding the most error in float (head, mix)",
        "int16 activations, int8 weights (int16x8)"]
    assert skipped == []
    assert cands[3].change == {"quantization": {"engine": "ai-edge-quantizer", "range_percentile": 99.9}}
    assert cands[5].change == {"quantization": {"engine": "ai-edge-quantizer",
                                                "int16_ops": ["^net/mix/MatMul$", "^net/head/MatMul$"]}}
    assert cands[7].change == {"quantization": {"keep_float": ["^net/mix/MatMul$", "^net/head/MatMul$"]}}


def test_int16_for_the_worst_ops_stops_at_three_and_never_takes_a_model_output(project: Path) -> None:
    ranked = [{"tensor": f"net/l{k}/MatMul", "source_layers": [f"l{k}"], "model_output": False} for k in range(5)]
    cands, _ = repair.candidates(_config(project), no_float=["edgetpu"], no_int16=[], available=200, used=200,
                                 ranked=[RANKED[2], *ranked], max_keep_float=5)
    int16 = [c.change["quantization"]["int16_ops"] for c in cands if "int16_ops" in c.change["quantization"]]
    assert int16 == [["^net/l0/MatMul$"], ["^net/l0/MatMul$", "^net/l1/MatMul$"],
                     ["^net/l0/MatMul$", "^net/l1/MatMul$", "^net/l2/MatMul$"]]
    assert len(int16) == repair.MAX_INT16_OPS


@pytest.mark.parametrize(("quantization", "why"), [
    ("{keep_float: [mix]}\ntargets: [arm-neon]", "outlier-robust ranges and int16 for some ops (AI Edge Quantizer): "
     "the pipeline keeps ops float with the converter's selective quantization (keep_float)"),
    ("{input_type: float32}", "outlier-robust ranges and int16 for some ops (AI Edge Quantizer): it gives int8 "
     "inputs and outputs, and the pipeline sets input_type float32"),
    ("{engine: ai-edge-quantizer, range_percentile: 99.9}\ntargets: [arm-neon]",
     "outlier-robust ranges: already at the 99.9th percentile"),
])
def test_where_ai_edge_quantizer_does_not_apply_the_report_says_why(project: Path, quantization: str,
                                                                     why: str) -> None:
    config = _config(project, f"quantization: {quantization}\n")
    cands, skipped = repair.candidates(config, no_float=[], no_int16=[], available=200, used=200, ranked=RANKED,
                                       max_keep_float=1, quantizer=repair.quantizer_problem(config))
    assert why in skipped
    assert not [c for c in cands if "range_percentile" in c.change.get("quantization", {})]


def test_ai_edge_quantizer_not_installed_rules_its_candidates_out(project: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ai_edge_quantizer" else real(name, *a))
    config = _config(project)
    assert repair.quantizer_problem(config) == "ai-edge-quantizer is not installed (pip install 'edgeconv[tf]')"


@pytest.mark.parametrize(("available", "expected"), [(200, None), (201, 201), (399, 399), (400, 400), (900, 400)])
def test_more_samples_means_twice_as_many_up_to_what_the_data_holds(project: Path, available: int,
                                                                    expected: int | None) -> None:
    cands, skipped = repair.candidates(_config(project), no_float=["edgetpu"], no_int16=["edgetpu"],
                                       available=available, used=200, ranked=RANKED, max_keep_float=5)
    samples = [c.change["calibration"]["samples"] for c in cands if "calibration" in c.change]
    assert samples == ([] if expected is None else [expected])
    if expected is None:
        assert "more calibration samples: the data holds no more than the 200 used" in skipped


def test_targets_that_cannot_run_a_change_rule_it_out_by_name(project: Path) -> None:
    cands, skipped = repair.candidates(_config(project), no_float=["edgetpu", "generic-int8"], no_int16=["edgetpu"],
                                       available=200, used=200, ranked=RANKED, max_keep_float=5)
    assert [c.what for c in cands] == [
        "activation ranges at the 99.99th percentile of the calibration values (AI Edge Quantizer)",
        "activation ranges at the 99.9th percentile of the calibration values (AI Edge Quantizer)"]
    assert skipped == ["per-channel weights: already on",
                       "more calibration samples: the data holds no more than the 200 used",
                       "int16 for the worst ops: edgetpu do(es) not run int16x8",
                       "ops kept in float: edgetpu, generic-int8 run(s) no float op in a quantized model",
                       "int16x8: edgetpu do(es) not run it"]
    _, why = repair.candidates(_config(project), no_float=[], no_int16=[], available=200, used=200, ranked=None,
                                  max_keep_float=5)
    assert "ops kept in float: no per-op error ranking to pick them (verify.culprits is 0)" in why


def test_a_change_applied_is_the_pipeline_the_snippet_loads_to(project: Path) -> None:
    config = _config(project, "quantization: {mode: int8, input_type: int8}\n")
    change = {"quantization": {"mode": "int16x8", "input_type": "auto", "output_type": "auto"},
              "calibration": {"samples": 150}}
    applied = repair.apply(config, change)
    pasted = (MINIMAL + "evaluation: {path: eval.npz}\n").replace("  path: cal.npz\n",
                                                                  "  path: cal.npz\n  samples: 150\n")
    loaded = load_pipeline(write(project, pasted + "quantization: {mode: int16x8}\ntargets: [arm-neon]\n",
                                 "pasted.yaml"))
    assert applied.quantization == loaded.quantization and applied.quantization.mode is QuantMode.INT16X8
    assert applied.calibration == loaded.calibration and applied.source == config.source
    assert yaml.safe_load(repair.snippet(change)) == change


def _trial(outcomes: dict[str, tuple[list[str], dict[str, float], int]]) -> Any:
    def trial(c: repair.Candidate) -> repair.TrialResult:
        failed, share, size = outcomes[c.what]
        return repair.TrialResult(failed, size, None, {"y": 30.0}, {"y": 0.95}, share)
    return trial


CANDS = [repair.Candidate(w, {"quantization": {"per_channel": True}}) for w in ("a", "b", "c", "d")]


def test_of_the_passing_trials_the_one_keeping_most_macs_supported_wins_then_the_smaller() -> None:
    found = repair.search(CANDS, _trial({"a": (["sqnr"], {"t": 1.0}, 100), "b": ([], {"t": 0.4}, 90),
                                         "c": ([], {"t": 0.9}, 120), "d": ([], {"t": 0.9}, 110)}),
                          max_trials=8, max_seconds=60, pipeline=Path("p.yaml"))
    assert found["chosen"] == 4 and found["closest"] is None and found["stopped"] == "tried every candidate"
    assert found["summary"].startswith("repair: trial 4 of 4 passes every gate: d; the output is built with it")
    assert [t["passes_gates"] for t in found["trials"]] == [False, True, True, True]


@pytest.mark.parametrize(("max_trials", "ran"), [(1, 1), (3, 3), (4, 4), (5, 4)])
def test_the_trial_budget_is_exact(max_trials: int, ran: int) -> None:
    fail = (["sqnr"], {"t": 1.0}, 100)
    found = repair.search(CANDS, _trial(dict.fromkeys("abcd", fail)), max_trials=max_trials, max_seconds=60,
                          pipeline=Path("p.yaml"))
    assert len(found["trials"]) == ran and found["chosen"] is None
    assert found["stopped"] == ("tried every candidate" if ran == 4 else
                                f"stopped at repair.max_trials ({max_trials}) with {4 - ran} candidate(s) left")


def test_the_time_budget_starts_no_trial_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 0.0, 5.0, 5.0, 61.0])  # start; trial 1 (starts at 0, 5 s); before trial 2: 61 s
    monkeypatch.setattr(repair.time, "monotonic", lambda: next(clock))
    found = repair.search(CANDS, _trial(dict.fromkeys("abcd", (["x"], {"t": 1.0}, 1))), max_trials=8,
                          max_seconds=60, pipeline=Path("p.yaml"))
    assert len(found["trials"]) == 1
    assert found["stopped"] == "stopped at repair.max_minutes (1) with 3 candidate(s) left"


def test_without_a_passing_trial_the_closest_is_the_one_failing_fewest_gates() -> None:
    found = repair.search(CANDS, _trial({"a": (["x", "y"], {"t": 1.0}, 1), "b": (["x"], {"t": 0.5}, 1),
                                         "c": (["y"], {"t": 0.9}, 1), "d": (["x", "y"], {"t": 1.0}, 1)}),
                          max_trials=8, max_seconds=60, pipeline=Path("p.yaml"))
    assert (found["chosen"], found["closest"], found["snippet"]) == (None, 3, None)
    assert found["summary"] == ("repair: no change among 4 trial(s) passes every gate (tried every candidate); "
                                "closest: trial 3; report.md lists each")


@pytest.mark.parametrize(("extra", "expected"), [
    ("repair: {enabled: true}\n",
     "p.yaml:6: repair.enabled: needs an evaluation section and verify.parity (the gates it meets are measured "
     "there)"),
    ("repair: {enabled: true, max_trials: 0}\n", "p.yaml:6: repair.max_trials: must be >= 1, got 0"),
    ("repair: {enabled: true, max_minute: 3}\n",
     "p.yaml:6: repair: unknown key 'max_minute' (allowed: allow_interface_change, enabled, max_minutes, max_trials); "
         "did you mean "
     "'max_minutes'?"),
])
def test_repair_settings_are_validated(project: Path, extra: str, expected: str) -> None:
    found = problems(write(project, MINIMAL + extra))
    assert expected in found, found


def test_repair_on_an_existing_tflite_is_refused(project: Path) -> None:
    (project / "m.tflite").write_bytes(b"TFL3")
    path = write(project, "version: 1\nmodel: {path: m.tflite}\nrepair: {enabled: true}\n")
    assert problems(path) == ["p.yaml:3: repair: does not apply to an existing .tflite model (it is checked as it "
                              "is: no passes, no conversion); remove it"]


def test_the_repair_flag_is_refused_where_the_setting_would_be(project: Path) -> None:
    from edgeconv import build

    with pytest.raises(ConfigError) as caught:
        build(write(project, MINIMAL), repair=True)
    assert list(caught.value.problems) == ["--repair needs an evaluation section and verify.parity (the gates it "
                                           "meets are measured there)"]


def test_build_repair_on_the_command_line_is_exit_2_with_the_reason(project: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from edgeconv.cli import main

    assert main(["build", str(write(project, MINIMAL)), "--repair"]) == 2
    assert capsys.readouterr().err == ("edgeconv: error: --repair needs an evaluation section and verify.parity (the "
                                       "gates it meets are measured there)\n")
    assert not (project / "build").exists()


# -- the model's interface, duplicates -------------------------------------------------------------

def test_changes_to_the_interface_are_not_tried_unless_allowed_and_say_so(project: Path) -> None:
    """int8 in and out as configured: keeping ops in float makes them float32 and int16x8 makes them int16; those
    candidates are named as not tried, with the setting that allows them."""
    config = _config(project)
    cands, _ = repair.candidates(config, no_float=[], no_int16=[], available=200, used=200, ranked=RANKED,
                                 max_keep_float=1, quantizer="not installed")
    kept, held = repair.keep_interface(config, cands, allow=False)
    assert kept == []
    assert held == [
        "keep the 1 op(s) adding the most error in float (mix): changes the model's interface (input int8 -> "
        "float32, output int8 -> float32); repair.allow_interface_change: true tries it",
        "int16 activations, int8 weights (int16x8): changes the model's interface (input int8 -> int16, output "
        "int8 -> int16); repair.allow_interface_change: true tries it"]
    kept, held = repair.keep_interface(config, cands, allow=True)
    assert [c.interface_change for c in kept] == ["input int8 -> float32, output int8 -> float32",
                                                  "input int8 -> int16, output int8 -> int16"]
    assert held == []


def test_a_pipeline_with_float_io_keeps_its_interface_with_ops_in_float(project: Path) -> None:
    config = _config(project, "quantization: {input_type: float32, output_type: float32}\n")
    change = {"quantization": {"keep_float": ["^net/mix/MatMul$"]}}
    assert repair.interface_change(config, change) is None
    (kept,), held = repair.keep_interface(config, [repair.Candidate("keep mix", change)], allow=False)
    assert kept.interface_change is None and held == []


def test_the_same_change_twice_is_one_trial(project: Path) -> None:
    """The ops a diagnosis points at, in another order than the ranking's: the same set of ops, tried once."""
    config = _config(project, "quantization: {input_type: float32, output_type: float32}\n")
    a = repair.Candidate("keep the ops that read input 'x' in float (SUB, MUL)",
                         {"quantization": {"keep_float": ["^sub$", "^mul$"]}})
    b = repair.Candidate("keep the 2 op(s) adding the most error in float (norm)",
                         {"quantization": {"keep_float": ["^mul$", "^sub$"]}})
    kept, held = repair.keep_interface(config, [a, b], allow=False)
    assert [c.what for c in kept] == [a.what]
    assert held == ["keep the 2 op(s) adding the most error in float (norm): the same change as an earlier trial"]


def test_worst_ops_naming_the_same_layers_as_the_next_count_are_not_a_trial_of_their_own(project: Path) -> None:
    """SUB and MUL of one normalization layer, then a dense layer: "1 op (norm)" would look like "2 ops (norm)"
    to the user; only the larger is tried."""
    ranked = [{"tensor": "net/norm/Sub", "source_layers": ["norm"], "model_output": False},
              {"tensor": "net/norm/Mul", "source_layers": ["norm"], "model_output": False},
              {"tensor": "net/d1/MatMul", "source_layers": ["d1"], "model_output": False}]
    cands, _ = repair.candidates(_config(project), no_float=[], no_int16=[], available=200, used=200, ranked=ranked,
                                 max_keep_float=3, quantizer="not installed")
    assert [c.what for c in cands if c.what.startswith("keep")] == [
        "keep the 2 op(s) adding the most error in float (norm)", "keep the 3 op(s) adding the most error in float "
        "(d1, norm)"]


def _found(interface: str | None, chosen: int | None) -> dict[str, Any]:
    trial = {"trial": 1, "change": "keep the ops that read input 'x' in float (SUB, MUL)",
             "interface_change": interface}
    return {"trials": [trial], "chosen": chosen, "closest": None if chosen else 1, "stopped": "tried every candidate",
            "skipped": ["int16x8: changes the model's interface (input int8 -> int16, output int8 -> int16); "
                        "repair.allow_interface_change: true tries it"]}


def test_the_summary_says_an_interface_change_and_what_was_not_tried() -> None:
    from edgeconv.verdict import Outcome, repair_check

    chosen = _found("input int8 -> float32, output int8 -> float32", 1)
    chosen["summary"] = repair.sentence(chosen, Path("p.yaml"))
    assert chosen["summary"] == (
        "repair: trial 1 of 1 passes every gate: keep the ops that read input 'x' in float (SUB, MUL); it CHANGES "
        "THE MODEL'S INTERFACE (input int8 -> float32, output int8 -> float32): firmware must feed and read those "
        "types; the output is built with it (add it to p.yaml: report.md shows the snippet)")
    assert repair_check(chosen, 12).outcome is Outcome.WARN  # annotated, in the summary: said everywhere
    kept = _found(None, 1)
    kept["summary"] = repair.sentence(kept, Path("p.yaml"))
    assert repair_check(kept, 12).outcome is Outcome.PASS
    none = _found(None, None)
    none["summary"] = repair.sentence(none, Path("p.yaml"))
    assert none["summary"].endswith("; 1 change(s) that would change the model's interface were not tried (int16x8): "
                                    "repair.allow_interface_change: true tries them")
    assert repair_check(none, 12).outcome is Outcome.FAIL


def test_an_interface_change_is_the_first_line_of_its_snippet() -> None:
    text = repair.snippet({"quantization": {"keep_float": ["^a$"]}}, "input int8 -> float32")
    assert text.splitlines()[0] == "# changes the model's interface: input int8 -> float32"
    assert yaml.safe_load(text) == {"quantization": {"keep_float": ["^a$"]}}


@pytest.mark.parametrize(("total", "batch", "split"), [
    (60, 1, ((0, 40), (40, 20))),  # a third is 20: just enough to hold back
    (59, 1, None),  # 19: too few, the search uses every sample
    (61, 1, ((0, 41), (41, 20))),
    (64, 4, ((0, 44), (44, 20))),  # whole batches on both sides
    (63, 4, ((0, 40), (40, 20))),  # the 3 samples left over from whole batches are in neither
])
def test_the_held_back_samples_are_a_third_in_whole_batches(total: int, batch: int,
                                                            split: tuple[tuple[int, int], tuple[int, int]] | None
                                                            ) -> None:
    from edgeconv.verify.stage import held_back_split

    assert held_back_split(total, batch) == split
