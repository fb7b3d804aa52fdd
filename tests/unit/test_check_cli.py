"""edgeconv check: any .tflite, any built-in target, no TensorFlow; JSON = the report's targets section."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from edgeconv.report import SCHEMA_PATH

from ..conftest import ORACLES, REPO, run_edgeconv

GEN_DOC = REPO / "scripts" / "gen_supported_ops.py"


def targets_schema() -> dict[str, object]:
    schema = json.loads(SCHEMA_PATH.read_text())
    return {"$schema": schema["$schema"], "$defs": schema["$defs"], **schema["properties"]["targets"]}


def test_json_is_the_report_targets_section_and_keeps_custom_codes() -> None:
    result = run_edgeconv("check", ORACLES / "bodypix_mobilenet_v1_075_512_512_16_quant_decoder.tflite",
                          "--target", "edgetpu", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, targets_schema())
    (target,) = data
    assert target["name"] == "edgetpu"
    custom = [op for op in target["ops"] if op["type"] == "CUSTOM"]
    assert [op["custom_code"] for op in custom] == ["PosenetDecoderOp"]
    assert target["first_blocking_op"]["index"] == custom[0]["index"]
    conv = next(op for op in target["ops"] if op["type"] == "CONV_2D")
    assert conv["macs"] == conv["gemm"]["m"] * conv["gemm"]["n"] * conv["gemm"]["k"] > 0


def test_json_writes_each_op_on_one_line() -> None:
    """The layout of indent=2, except that each op of a target is one line (and one JSON object)."""
    result = run_edgeconv("check", ORACLES / "deeplabv3_mnv2_dm05_pascal_quant.tflite", "--target", "edgetpu",
                          "--target", "arm-neon", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    lines = result.stdout.splitlines()
    op_lines = [line for line in lines if line.startswith('      {"index": ')]
    assert [json.loads(line.rstrip(",")) for line in op_lines] == [
        op for t in data for op in (*t["ops"], *t.get("blocking_ops", ()))]
    assert len(op_lines) == 2 * 72 + 1  # and the Edge TPU's one blocking op
    assert lines[:3] == ["[", "  {", '    "name": "edgetpu",']
    assert lines[-2:] == ["  }", "]"]
    assert '    "counts": {' in lines and '      "supported": 64,' in lines


@pytest.mark.parametrize("value", [
    [], {}, [[]], [{}], {"ops": []}, {"ops": [{}]}, {"ops": 1.0}, {"ops": {"a": [1, {"b": None}]}},
    {"x": {"ops": [{"a": [1, 2], "b": {"c": "d"}}, {"e": "\u00e9\n\"q\""}]}},
    {7: "int key", True: "bool key", None: "none key", 2.5: "float key"},
    [{"ops": [{"violations": [{"id": "x", "fix": "y"}]}]}, {"name": "t", "ops": []}],
    "text", 0, -1.5, None, True,
])
def test_json_text_is_what_json_reads_back(value: object) -> None:
    from edgeconv.check_output import json_text

    text = json_text(value)
    assert json.loads(text) == json.loads(json.dumps(value))
    if '"ops": [\n' not in text:  # without a list of ops: json's own layout
        assert text == json.dumps(value, indent=2)


@pytest.mark.parametrize(("args", "code", "line"), [
    (["--target", "edgetpu"], 0,
     "edgetpu: PASS (64 supported, 8 cpu_fallback, 0 unsupported; 82.9% of MACs supported)"),
    (["--target", "edgetpu", "--max-cpu-fallback", "0"], 1,
     "gate: target edgetpu: 8 op(s) fall back to the CPU, more than gates.max_cpu_fallback_ops.edgetpu = 0; first "
     "blocking op #64 RESIZE_BILINEAR"),
    (["--target", "edgetpu", "--min-mac-share", "0.9"], 1,
     "gate: edgetpu: 64 of 72 ops (82.9% of MACs) on the Edge TPU; first blocking op #64 RESIZE_BILINEAR: "
     "align_corners=True resizing 1x1 to 33x33; less than the 90% of MACs the gate requires "
     "(gates.min_supported_mac_share.edgetpu)"),
    (["--target", "edgetpu", "--min-mac-share", "0.8287"], 0,  # just inside the measured 0.82871
     "edgetpu: PASS (64 supported, 8 cpu_fallback, 0 unsupported; 82.9% of MACs supported)"),
    (["--target", "generic-int8"], 1, "gate: target generic-int8: 71 unsupported op(s): ADD x10, ARG_MAX x1, "
     "AVERAGE_POOL_2D x1, CONCATENATION x1, CONV_2D x38, DEPTHWISE_CONV_2D x17, RESIZE_BILINEAR x3"),
])
def test_exit_codes_and_gates(args: list[str], code: int, line: str) -> None:
    result = run_edgeconv("check", ORACLES / "deeplabv3_mnv2_dm05_pascal_quant.tflite", *args)
    assert result.returncode == code, result.stderr
    assert line in result.stdout.splitlines()


@pytest.mark.parametrize(("content", "message"), [
    (None, "edgeconv: error: model_invoking_error.tflite: invalid TFLite model: tensor 0 of subgraph 0 uses buffer "
           "0, but the model has 0 buffers"),
    (b"", "edgeconv: error: broken.tflite: the file is empty, not a TFLite model"),
    (np.random.default_rng(5).bytes(3000), "edgeconv: error: broken.tflite: not a TFLite flatbuffer (no 'TFL3' file "
                                           "identifier)"),
])
def test_broken_files_are_exit_2(tmp_path: Path, content: bytes | None, message: str) -> None:
    if content is None:
        (tmp_path / "model_invoking_error.tflite").write_bytes((ORACLES / "model_invoking_error.tflite").read_bytes())
        name = "model_invoking_error.tflite"
    else:
        (tmp_path / "broken.tflite").write_bytes(content)
        name = "broken.tflite"
    result = run_edgeconv("check", name, "--target", "edgetpu", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == message


def test_markdown_names_the_first_blocking_op() -> None:
    result = run_edgeconv("check", ORACLES / "deeplabv3_mnv2_dm05_pascal_quant.tflite", "--target", "edgetpu",
                          "--format", "md")
    assert result.returncode == 0
    assert ("**edgetpu: first blocking op #64 RESIZE_BILINEAR** (layers: -): align_corners=True resizing 1x1 to "
            "33x33. Every op that depends on it runs on the CPU.") in result.stdout


def test_supported_ops_doc_is_generated_from_the_targets() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_supported_ops", GEN_DOC)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (REPO / "docs" / "SUPPORTED_OPS.md").read_text()
    assert committed == module.render(), "stale: run python scripts/gen_supported_ops.py"
    assert "`edgetpu.<OP>.op_version_runtime`" in committed


def test_check_against_a_users_target_file(tmp_path: Path) -> None:
    (tmp_path / "npu.yaml").write_text(
        "schema_version: 1\nname: my-npu\ntitle: My NPU\nsources: {DOC: vendor manual 2.1}\n"
        "default_effect: cpu_fallback\nunlisted: {source: DOC, effect: cpu_fallback}\n"
        "ops:\n  CONV_2D: {source: DOC, rules: [{check: fused_activation, allowed: [NONE]}]}\n")
    model = REPO / "tests" / "data" / "conv2d-relu.int8.tflite"
    result = run_edgeconv("check", model, "--target", "npu.yaml", "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (target,) = json.loads(result.stdout)
    assert target["name"] == "my-npu" and target["counts"]["cpu_fallback"] == 1
    assert [v["rule"] for v in target["ops"][0]["violations"]] == ["my-npu.CONV_2D.fused_activation"]
    shown = run_edgeconv("targets", "show", "npu.yaml", "--op", "CONV_2D", cwd=tmp_path)
    lines = shown.stdout.splitlines()
    at = lines.index("  my-npu.CONV_2D.fused_activation (if broken: cpu_fallback) [DOC]")
    assert lines[at + 1] == "      The fused activation function is one of: NONE."
    missing = run_edgeconv("check", model, "--target", "nope.yaml", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip() == "edgeconv: error: nope.yaml: file not found"


NPU = ("schema_version: 1\nname: my-npu\ntitle: {title}\nsources: {{DOC: {source}}}\n"
       "default_effect: cpu_fallback\nunlisted: {{source: DOC, effect: cpu_fallback, fix: {fix}}}\n"
       "ops:\n  CONV_2D: {{source: DOC, rules: [{{check: fused_activation, allowed: [{allowed}]}}]}}\n")
PLAIN = {"title": "My NPU", "source": "vendor manual", "fix": "use CONV_2D", "allowed": "NONE"}


@pytest.mark.parametrize(("key", "value", "line", "said"), [
    ("title", '"My \\e[2J NPU"', 3, "title: holds a control character (U+001B)"),
    ("title", '""', 3, "title: expected a non-empty text value"),  # was never raised
    ("source", '"manual\\rOVERWRITTEN"', 4, "sources.DOC: holds a control character (U+000D)"),
    ("fix", '"use \\x9b31m"', 6, "unlisted.fix: holds a control character (U+009B)"),
    ("fix", '"use \\u202eCONV"', 6, "unlisted.fix: holds a control character (U+202E)"),
    ("allowed", '"NO\\x7fNE"', 8, "ops.CONV_2D.rules[0].allowed: holds a control character (U+007F)"),
])
def test_a_target_file_text_with_a_control_character_is_refused(tmp_path: Path, key: str, value: str, line: int,
                                                                 said: str) -> None:
    """A target file is a pull request's to write and its texts are printed as they are: an escape sequence,
    a carriage return or a bidirectional override in one would reach the CI log and the terminal."""
    (tmp_path / "npu.yaml").write_text(NPU.format(**{**PLAIN, key: value}))
    model = REPO / "tests" / "data" / "conv2d-relu.int8.tflite"
    result = run_edgeconv("check", model, "--target", "npu.yaml", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    tail = "" if "control" not in said else ": edgeconv prints a target's texts as they are; write it without one"
    assert result.stderr.strip() == f"edgeconv: error: npu.yaml:{line}: {said}{tail}"


@pytest.mark.parametrize("fix", ['"a\\tb"', '"two\\nlines"', "'single \\e quoted'"])
def test_tabs_and_line_breaks_in_a_target_file_text_are_text(tmp_path: Path, fix: str) -> None:
    (tmp_path / "npu.yaml").write_text(NPU.format(**{**PLAIN, "fix": fix}))
    model = REPO / "tests" / "data" / "conv2d-relu.int8.tflite"
    assert run_edgeconv("check", model, "--target", "npu.yaml", cwd=tmp_path).returncode == 0


def test_a_reader_that_goes_away_is_not_a_crash(tmp_path: Path) -> None:
    """`edgeconv check big.tflite | head -1`: the pipe closes early; no BrokenPipeError, no crash log."""
    import subprocess
    import sys

    model = ORACLES / "deeplabv3_mnv2_dm05_pascal_quant.tflite"
    proc = subprocess.run(f"'{sys.executable}' -m edgeconv check '{model}' "
                          "--target edgetpu --target arm-neon --format json | head -c 10", shell=True,
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.stdout == "[\n  {\n    " and proc.stderr == ""
    assert not list(tmp_path.rglob("edgeconv-crash.log"))


@pytest.mark.parametrize(("estimates", "line"), [
    ({"sram_kib": 0.5, "off_chip_flash_kib": 0.296875, "on_chip_flash_kib": 0.0, "dram_kib": 0.0, "macs": 8820.0,
      "cycles_npu": 1832.0, "cycles_total": 1832.0, "inference_time_s": 3.664e-06,
      "inferences_per_second": 272925.76},
     "u55 (Vela estimate): SRAM 0.5 KiB; flash 0.3 KiB; 1,832 cycles; 3.7 µs per inference, 272,926 inferences/s"),
    ({"sram_kib": 380.25, "off_chip_flash_kib": 3120.0, "dram_kib": 12.0, "cycles_npu": 9_000_000.0,
      "cycles_total": 9_500_000.0, "inference_time_s": 0.019, "inferences_per_second": 52.6},
     "u55 (Vela estimate): SRAM 380.2 KiB; flash 3,120.0 KiB; DRAM 12.0 KiB; 9,500,000 cycles (9,000,000 on the "
     "NPU); 19.00 ms per inference, 53 inferences/s"),
    ({}, None),
])
def test_vela_estimates_in_one_line(estimates: dict[str, float], line: str | None) -> None:
    from edgeconv.report import estimates_line

    assert estimates_line({"name": "u55", "estimates": estimates}) == line


def test_check_shows_vela_estimates_in_text_and_markdown() -> None:
    model = REPO / "tests" / "data" / "conv2d-relu.int8.tflite"
    text = run_edgeconv("check", model, "--target", "ethos-u55-128")
    assert text.returncode == 0, text.stderr
    (said,) = [line for line in text.stdout.splitlines() if "(Vela estimate" in line]
    assert said.startswith("  ethos-u55-128 (Vela estimate with system config Ethos_U55_High_End_Embedded, memory mode "
                           "Shared_Sram): SRAM ") and " inferences/s" in said
    md = run_edgeconv("check", model, "--target", "ethos-u55-128", "--format", "md")
    assert said.strip() in md.stdout


# -- --reference-inputs: each target's runtime against edgeconv's reference ----------------------------------

def _inputs(tmp_path: Path) -> Path:
    from edgeconv.converters.tflite_reader import read_tflite

    model = read_tflite(REPO / "tests" / "data" / "conv2d-relu.int8.tflite")
    spec = model.main.tensors[model.main.inputs[0]]
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "x.npz", **{spec.name: rng.integers(-128, 128, (11, *spec.shape[1:])).astype(np.int8)})
    return tmp_path / "x.npz"


@pytest.mark.parametrize(("limit", "code"), [("1", 0), ("0", 1)])
def test_reference_inputs_compare_each_target_runtime_and_gate_it(tmp_path: Path, limit: str, code: int) -> None:
    """One CONV_2D: LiteRT's optimized kernels and TFLite Micro agree with the reference bit for bit; XNNPACK
    rounds 0.16 % of the outputs one LSB off, which --max-drift-lsb 0 fails (arm-neon then fails) and 1 passes.
    8 of the 11 samples are compared (no TensorFlow: check stays light)."""
    x = _inputs(tmp_path)
    model = REPO / "tests" / "data" / "conv2d-relu.int8.tflite"
    args = ("--target", "generic-int8", "--target", "arm-neon", "--target", "tflm-cmsis-nn", "--reference-inputs", x,
            "--max-drift-lsb", limit)
    result = run_edgeconv("check", model, *args, "--format", "json")
    assert result.returncode == code, result.stderr
    drift = json.loads(result.stdout)["runtime_drift"]
    assert (drift["samples"], drift["data"]) == (8, "reference-inputs")
    assert {k: (r["target"], r["max_lsb"], len(r["ops"])) for k, r in drift["runtimes"].items()} == {
        "builtin": ("generic-int8", 0, 0), "xnnpack": ("arm-neon", 1, 1), "tflm": ("tflm-cmsis-nn", 0, 0)}
    text = run_edgeconv("check", model, *args).stdout.splitlines()
    assert ("drift: xnnpack (arm-neon): at most 1 LSB from the reference, 1 of 1 op output(s) differ; first at op "
            "#0 CONV_2D (8 reference-inputs samples)") in text
    assert ("arm-neon: FAIL" if code else "arm-neon: PASS") in "\n".join(text)


def test_max_drift_lsb_without_reference_inputs_is_refused(tmp_path: Path) -> None:
    result = run_edgeconv("check", REPO / "tests" / "data" / "conv2d-relu.int8.tflite", "--max-drift-lsb", "0")
    assert result.returncode == 2
    assert result.stderr.strip() == ("edgeconv: error: --max-drift-lsb needs --reference-inputs (the samples the "
                                     "runtimes are compared on)")


def test_a_pickled_reference_inputs_file_runs_no_code(tmp_path: Path) -> None:
    np.save(tmp_path / "evil.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "evil.npz").write_bytes((tmp_path / "evil.npy").read_bytes())
    result = run_edgeconv("check", REPO / "tests" / "data" / "conv2d-relu.int8.tflite", "--reference-inputs",
                          tmp_path / "evil.npz")
    assert result.returncode == 2 and "not a readable .npz" in result.stderr
