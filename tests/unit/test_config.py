from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml

from edgeconv import ConfigError, load_pipeline, report_model
from edgeconv.calibration import resolve_source
from edgeconv.cli import main
from edgeconv.config import pipeline_json_schema, pipeline_json_schema_text, resolved_yaml
from edgeconv.passes import StripTrainingPass

from ..conftest import REPO, TARGET_CHOICES, run_edgeconv


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # messages show paths as the user typed them
    (tmp_path / "m.keras").write_bytes(b"PK")  # validation only checks that files exist
    (tmp_path / "cal.npz").write_bytes(b"PK")
    return tmp_path


def write(project: Path, text: str, name: str = "p.yaml") -> Path:
    path = project / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


MINIMAL = """
version: 1
model:
  path: m.keras
calibration:
  path: cal.npz
"""


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    return list(info.value.problems)


def test_shipped_example_is_valid() -> None:
    config = load_pipeline(REPO / "pipeline.yaml")
    assert config.build_name == "digits"
    assert config.targets == ("generic-int8", "arm-neon", "edgetpu", "tflm-cmsis-nn")
    assert [p.name for p in config.passes] == ["strip-training"]
    assert resolve_source(config.calibration) == "npz"


def test_defaults_are_filled(project: Path) -> None:
    config = load_pipeline(write(project, MINIMAL))
    assert config.passes == (StripTrainingPass(),)
    assert config.targets == ("generic-int8",)
    assert config.calibration.samples == 200 and config.calibration.seed == 0
    assert config.verify.pass_tolerance == 1e-5
    assert config.output_dir == project / "build" / "m"
    assert config.model.path == project / "m.keras"


def test_resolved_pipeline_round_trips(project: Path) -> None:
    config = load_pipeline(write(project, MINIMAL))
    out = project / "build" / "m"
    out.mkdir(parents=True)
    resolved = out / "pipeline.resolved.yaml"
    resolved.write_text(resolved_yaml(config, out))
    again = load_pipeline(resolved)
    assert again.model.path == config.model.path
    assert again.model.resolved_format() is config.model.resolved_format()
    assert again.quantization == config.quantization and again.verify == config.verify
    assert again.calibration.path == config.calibration.path
    assert again.calibration == dataclasses.replace(config.calibration, source="npz")
    assert again.output_dir == out
    data = yaml.safe_load(resolved.read_text())
    assert data["passes"] == [{"name": "strip-training"}]
    assert data["verify"] == {"pass_tolerance": 1e-05, "pass_samples": 8, "parity": True, "float_tolerance": 1e-05,
                              "runtime_drift": 0, "culprits": 5, "outputs": {}, "suggest_keep_float": False,
                              "max_keep_float": 5}


@pytest.mark.parametrize(("text", "expected"), [
    (MINIMAL + "calibraton: {path: cal.npz}\n",
     "p.yaml:6: top level: unknown key 'calibraton' (allowed: calibration, evaluation, gates, model, name, output, "
     "passes, quantization, repair, requires, targets, verify, version); did you mean 'calibration'?"),
    (MINIMAL.replace("  path: cal.npz", "  path: cal.npz\n  sample: 10"),
     "p.yaml:6: calibration: unknown key 'sample' (allowed: columns, expected_range, features, function, input, "
     "min_samples, path, preprocess, samples, seed, source, stride, trust_code, window); did you mean 'samples'?"),
    (MINIMAL + "name: /any/path/x\n",
     "p.yaml:6: name: '/any/path/x' is not a file name: it names the files written inside the output folder "
     "(letters, digits, '.', '_', '-'; not a path, not starting with '.')"),
    (MINIMAL + "name: ../../x\n",
     "p.yaml:6: name: '../../x' is not a file name: it names the files written inside the output folder "
     "(letters, digits, '.', '_', '-'; not a path, not starting with '.')"),
    (MINIMAL + "name: sub/dir\n",
     "p.yaml:6: name: 'sub/dir' is not a file name: it names the files written inside the output folder "
     "(letters, digits, '.', '_', '-'; not a path, not starting with '.')"),
    (MINIMAL + "verify: {outputs: {boxes: regresion}}\n",
     "p.yaml:6: verify.outputs.boxes: unknown output kind 'regresion' (allowed: binary, boxes, classification, "
     "index, multilabel, regression); did you mean 'regression'?"),
    (MINIMAL + "gates: {disable: [acuracy]}\n",
     "p.yaml:6: gates.disable[0]: unknown default gate 'acuracy' (allowed: accelerator, accuracy, agreement, "
     "calibration); did you mean 'accuracy'?"),
    (MINIMAL + "targets: [generic-int9]\n",
     f"p.yaml:6: targets[0]: unknown target 'generic-int9' (allowed: {TARGET_CHOICES}); did you mean 'generic-int8'?"),
    (MINIMAL + "passes: [strip-trainig]\n",
     "p.yaml:6: passes[0]: unknown pass 'strip-trainig' (allowed: lower-conv-to-gemm, strip-training); did you "
     "mean 'strip-training'?"),
    (MINIMAL + "quantization: {input_type: int4}\n",
     "p.yaml:6: quantization.input_type: unknown value 'int4' (allowed: auto, float32, int16, int8, uint8); did you "
     "mean 'int8'?"),
    (MINIMAL.replace("path: m.keras", "path: missing.keras"),
     "p.yaml:3: model.path: file not found: 'missing.keras' (resolved to {project}/missing.keras)"),
    (MINIMAL.replace("  path: cal.npz", "  path: cal.npz\n  samples: many"),
     "p.yaml:6: calibration.samples: expected an integer, got 'many'"),
    (MINIMAL.replace("  path: cal.npz", "  path: cal.npz\n  samples: 0"),
     "p.yaml:6: calibration.samples: must be >= 1, got 0"),
    (MINIMAL.replace("  path: cal.npz", "  path: cal.npz\n  samples: '10'"),
     "p.yaml:6: calibration.samples: expected an integer, got '10'"),
    (MINIMAL + "quantization: {per_channel: yes}\n",
     "p.yaml:6: quantization.per_channel: expected true or false, got 'yes'"),
    (MINIMAL + "verify: {pass_tolerance: 1e-x}\n",
     "p.yaml:6: verify.pass_tolerance: expected a number, got '1e-x'"),
    ("version: 1\nmodel:\n  path: m.keras\n",
     "p.yaml:1: top level: missing required key 'calibration' (quantization mode int8 is calibrated on real data)"),
    (MINIMAL + "model: {path: m.keras}\n",
     "p.yaml:6: model: duplicate key (first given on line 2)"),
    (MINIMAL + "targets: []\n",
     "p.yaml:6: targets: expected a non-empty list of target names"),
    (MINIMAL + "targets: [generic-int8, generic-int8]\n",
     "p.yaml:6: targets[1]: target 'generic-int8' is listed more than once"),
    (MINIMAL + "passes: [strip-training, strip-training]\n",
     "p.yaml:6: passes: pass 'strip-training' is listed more than once"),
    (MINIMAL + "passes: [{name: strip-training, aggressive: true}]\n",
     "p.yaml:6: passes[0]: unknown key 'aggressive' (allowed: none)"),
    (MINIMAL.replace("path: cal.npz", "path: cal.csv"),
     "p.yaml:5: calibration.path: file not found: 'cal.csv' (resolved to {project}/cal.csv)"),
    (MINIMAL.replace("  path: m.keras", "  path: m.keras\n  batch_size: 3"),
     "p.yaml:6: calibration.samples: 200 is not a multiple of model.batch_size (3); each calibration step feeds "
     "one full batch"),
    (MINIMAL.replace("  path: m.keras", "  path: m.keras\n  input_shapes: {image: [1, 0, 3]}"),
     "p.yaml:4: model.input_shapes.image: expected a non-empty list of dimensions >= 1, got [1, 0, 3]"),
    (MINIMAL.replace("path: cal.npz", "path: cal.npz\nevaluation: {path: cal.npz}") + "gates: {min_sqnr_db: {}}\n",
     "p.yaml:7: gates.min_sqnr_db: an empty mapping: give a number for every output, or {{output name: number}}"),
    (MINIMAL.replace("path: cal.npz", "path: cal.npz\nevaluation: {path: cal.npz}")
     + "gates: {min_top1_agreement: {label: 1.5}}\n",
     "p.yaml:7: gates.min_top1_agreement.label: must be <= 1.0, got 1.5"),
    (MINIMAL.replace("path: cal.npz", "path: cal.npz\nevaluation: {path: cal.npz}")
     + "gates: {min_sqnr_db: {boxes: high}}\n",
     "p.yaml:7: gates.min_sqnr_db.boxes: expected a number, got 'high'"),
    (MINIMAL.replace("path: cal.npz", "path: cal.npz\nevaluation: {path: cal.npz}")
     + "gates: {min_cosine: [0.9]}\n",
     "p.yaml:7: gates.min_cosine: expected a number for every output, or {{output name: number}}, got a list"),
    (MINIMAL + "gates: {min_sqnr_db: {boxes: 15}}\n",
     "p.yaml:6: gates.min_sqnr_db: needs an evaluation section (the data parity is measured on)"),
    (MINIMAL + "verify: {pass_samples: 500}\n",
     "p.yaml:6: verify.pass_samples: 500 is more than calibration.samples (200)"),
])
def test_config_errors_point_at_the_mistake(project: Path, text: str, expected: str) -> None:
    assert problems(write(project, text)) == [expected.format(project=project)]


def test_unknown_suffix_needs_an_explicit_source(project: Path) -> None:
    (project / "cal.bin").write_bytes(b"x")
    path = write(project, MINIMAL.replace("path: cal.npz", "path: cal.bin"))
    assert problems(path) == ["p.yaml:5: calibration.path: cannot tell the data source from suffix '.bin' "
                              "(known: .csv, .npy, .npz, .tfrec, .tfrecord, .tfrecords, or a folder); set "
                              "calibration.source"]


def test_every_problem_is_reported_at_once(project: Path) -> None:
    path = write(project, """
        version: 1
        model: {path: m.keras, batch_sise: 1}
        calibration: {path: cal.npz, seed: -1}
        targets: [edgetpu-v2]
        """)
    assert problems(path) == [
        "p.yaml:2: model: unknown key 'batch_sise' (allowed: batch_size, bind, custom_modules, custom_objects, format, "
        "input_shapes, inputs, outputs, path, signature, trust_code); did you mean 'batch_size'?",
        "p.yaml:3: calibration.seed: must be >= 0, got -1",
        f"p.yaml:4: targets[0]: unknown target 'edgetpu-v2' (allowed: {TARGET_CHOICES}); did you mean 'edgetpu'?",
    ]


@pytest.mark.parametrize(("text", "expected"), [
    ("version: 1\nmodel: [\n", "p.yaml:3:1: invalid YAML: expected the node content, but found '<stream end>'"),
    ("version: 1\n  model: x\n", "p.yaml:2:8: invalid YAML: mapping values are not allowed here"),
    ("", "p.yaml: the file is empty"),
    ("- 1\n- 2\n", "p.yaml:1: expected a mapping, got a list"),
    ("version: 2\n", "p.yaml:1: version: unsupported pipeline schema version '2' (supported: 1)"),
])
def test_malformed_files(project: Path, text: str, expected: str) -> None:
    path = project / "p.yaml"
    path.write_text(text)
    assert problems(path) == [expected]


def test_missing_pipeline_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: file not found"):
        load_pipeline(tmp_path / "nope.yaml")


def test_committed_json_schema_is_generated_from_the_config_model() -> None:
    committed = (REPO / "edgeconv" / "schemas" / "pipeline.schema.json").read_text()
    regenerate = "run: edgeconv schema pipeline > edgeconv/schemas/pipeline.schema.json"
    assert committed == pipeline_json_schema_text(), regenerate


def test_committed_report_schema_is_generated_from_the_report_model() -> None:
    committed = (REPO / "edgeconv" / "schemas" / "report.schema.json").read_text()
    regenerate = "run: edgeconv schema report > edgeconv/schemas/report.schema.json"
    assert committed == report_model.json_schema_text(), regenerate
    jsonschema.Draft202012Validator.check_schema(json.loads(committed))


def test_json_schema_accepts_the_example_and_rejects_mistakes() -> None:
    schema = pipeline_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    example = yaml.safe_load((REPO / "pipeline.yaml").read_text())
    jsonschema.validate(example, schema)
    for broken in ({**example, "calibraton": {}}, {**example, "targets": ["generic-int9"]},
                   {**example, "version": 2}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


def test_validate_cli_exit_codes(project: Path) -> None:
    good = write(project, MINIMAL)
    result = run_edgeconv("validate", good)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    bad = write(project, MINIMAL + "targets: [edge-tpu]\n", "bad.yaml")
    result = run_edgeconv("validate", bad)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"edgeconv: error: bad.yaml:6: targets[0]: unknown target 'edge-tpu' (allowed: {TARGET_CHOICES}); did you "
        "mean 'edgetpu'?"]
    assert json.loads(run_edgeconv("schema", "pipeline").stdout)["title"] == "edgeconv pipeline"


ABSENT = """
version: 1
model:
  path: models/kws
calibration:
  path: data/calib
  source: images
  preprocess: {scale: 0.00392156862745098}
evaluation:
  path: data/eval.npz
  labels: label
targets: [{target}]
"""


@pytest.mark.parametrize(("target", "code", "said"), [
    ("arm-neon", 0, "p.yaml: valid (model models/kws (savedmodel), targets arm-neon, passes strip-training; not "
                    "checked, absent: model, calibration data, evaluation data)"),
    # Everything the files do not decide is still checked: a typo here, a target file that is not there.
    ("arm-neo", 2, "edgeconv: error: p.yaml:12: targets[0]: unknown target 'arm-neo'"),
    ("targets/npu.yaml", 2, "edgeconv: error: p.yaml:12: targets[0]: target file not found: 'targets/npu.yaml'"),
])
def test_validate_no_files_checks_a_pipeline_whose_model_and_data_are_not_fetched_yet(
        tmp_path: Path, target: str, code: int, said: str) -> None:
    """A repository whose model (a SavedModel folder) and data (an image folder, an .npz) come from DVC, LFS or
    a bucket in CI: without --no-files each absent file is an error; with it the pipeline is valid and the
    absent files are named."""
    (tmp_path / "p.yaml").write_text(ABSENT.replace("{target}", target))
    strict = run_edgeconv("validate", "p.yaml", cwd=tmp_path)
    assert strict.returncode == 2 and "p.yaml:4: model.path: file not found: 'models/kws'" in strict.stderr
    result = run_edgeconv("validate", "--no-files", "p.yaml", cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert (result.stdout if code == 0 else result.stderr).startswith(said)
    assert not any(tmp_path.glob("build*"))


MY_TARGET = """
schema_version: 1
name: my-npu
title: My NPU
sources: {DOC: "vendor manual 2.1, section 3"}
ops:
  CONV_2D: {source: DOC, rules: [{check: tensor_dtype, inputs: [int8, int8, int32], outputs: [int8]}]}
"""


def test_a_target_file_can_be_a_target(project: Path) -> None:
    (project / "targets").mkdir()
    (project / "targets" / "my_npu.yaml").write_text(MY_TARGET)
    config = load_pipeline(write(project, MINIMAL + "targets: [generic-int8, targets/my_npu.yaml]\n"
                                 "gates: {max_cpu_fallback_ops: {my-npu: 0}}\n"))
    assert config.targets == ("generic-int8", str(project / "targets" / "my_npu.yaml"))
    out = project / "build" / "m"
    out.mkdir(parents=True)
    assert yaml.safe_load(resolved_yaml(config, out))["targets"] == ["generic-int8", "../../targets/my_npu.yaml"]


@pytest.mark.parametrize(("target_file", "line", "expected"), [
    (None, "targets: [npu.yaml]\n",
     "p.yaml:6: targets[0]: target file not found: 'npu.yaml' (resolved to {project}/npu.yaml)"),
    (MY_TARGET.replace("tensor_dtype", "tensor_dtyp"), "targets: [npu.yaml]\n",
     "npu.yaml:7: ops.CONV_2D.rules[0].check: unknown constraint 'tensor_dtyp' (allowed: {constraints}); did you mean "
     "'tensor_dtype'?"),
    (MY_TARGET, "targets: [npu.yaml, npu.yaml]\n", "p.yaml:6: targets[1]: target 'my-npu' is listed more than once"),
    (MY_TARGET, "targets: [npu.yaml]\ngates: {max_cpu_fallback_ops: {edgetpu: 0}}\n",
     "p.yaml:7: gates.max_cpu_fallback_ops.edgetpu: 'edgetpu' is not one of the pipeline's targets (my-npu)"),
    (MY_TARGET, "targets: [npu.yaml]\ngates: {min_supported_mac_share: {my-npu: 1.5}}\n",
     "p.yaml:7: gates.min_supported_mac_share.my-npu: out of range: 1.5"),
])
def test_target_file_and_gate_errors(project: Path, target_file: str | None, line: str, expected: str) -> None:
    from edgeconv.errors import allowed_list
    from edgeconv.targets.constraints import CONSTRAINTS

    if target_file is not None:
        (project / "npu.yaml").write_text(target_file)
    assert problems(write(project, MINIMAL + line)) == [
        expected.format(project=project, constraints=allowed_list(CONSTRAINTS))]


# -- model formats ------------------------------------------------------------------------------

@pytest.fixture
def formats(project: Path) -> Path:
    (project / "g.pb").write_bytes(b"\x0a")
    (project / "legacy.h5").write_bytes(b"\x89HDF")
    (project / "m.tflite").write_bytes(b"TFL3")
    (project / "sm").mkdir()
    (project / "sm" / "saved_model.pb").write_bytes(b"\x08")
    (project / "empty_dir").mkdir()
    return project


@pytest.mark.parametrize(("model", "fmt"), [
    ("m.keras", "keras"), ("legacy.h5", "h5"), ("g.pb", "graphdef"), ("sm", "savedmodel"), ("m.tflite", "tflite"),
])
def test_model_format_is_picked_from_the_path(formats: Path, model: str, fmt: str) -> None:
    cal = "" if fmt == "tflite" else "calibration:\n  path: cal.npz\n"
    config = load_pipeline(write(formats, f"version: 1\nmodel:\n  path: {model}\n{cal}"))
    assert config.model.resolved_format().value == fmt


@pytest.mark.parametrize(("model_yaml", "expected"), [
    ("  path: g.pb\n  bind: {is_training: maybe}\n",
     "p.yaml:4: model.bind.is_training: expected true, false or a number, got 'maybe'"),
    ("  path: g.pb\n  bind: {is_training: 'false'}\n",
     "p.yaml:4: model.bind.is_training: expected true, false or a number, got 'false'"),
    ("  path: g.pb\n  bind: [is_training]\n",
     "p.yaml:4: model.bind: expected a mapping of placeholder name to value, e.g. {is_training: false}"),
    ("  path: m.keras\n  bind: {is_training: false}\n",
     "p.yaml:4: model.bind: applies to graphdef and savedmodel models only (this model is keras)"),
    ("  path: sm\n  inputs: [image]\n",
     "p.yaml:4: model.inputs: applies to graphdef models only (this model is savedmodel)"),
    ("  path: m.keras\n  outputs: [probs]\n",
     "p.yaml:4: model.outputs: applies to graphdef models only (this model is keras)"),
    ("  path: g.pb\n  signature: serve\n",
     "p.yaml:4: model.signature: applies to savedmodel models only (this model is graphdef)"),
    ("  path: g.pb\n  custom_modules: [layers]\n  trust_code: true\n",
     "p.yaml:4: model.custom_modules: applies to keras and h5 models only (this model is graphdef)"),
    ("  path: m.keras\n  custom_modules: [layers]\n",
     "p.yaml:4: model.custom_modules: runs code from the pipeline's folder; set model.trust_code: true if you trust "
     "that code"),
    ("  path: m.keras\n  custom_objects: {Face: 'face:Face'}\n",
     "p.yaml:4: model.custom_objects: runs code from the pipeline's folder; set model.trust_code: true if you trust "
     "that code"),
    ("  path: m.keras\n  custom_objects: {Face: face.Face}\n  trust_code: true\n",
     "p.yaml:4: model.custom_objects.Face: expected 'module:Class', got 'face.Face'"),
    ("  path: empty_dir\n",
     "p.yaml:3: model.path: 'empty_dir' is not a SavedModel folder (no saved_model.pb in it)"),
    ("  path: sm\n  format: keras\n",
     "p.yaml:3: model.path: 'sm' is a folder; a keras model is a file"),
    ("  path: g.pb\n  format: savedmodel\n",
     "p.yaml:3: model.path: 'g.pb' is a file; a SavedModel is a folder"),
    ("  path: g.pb\n  format: onnx\n",
     "p.yaml:4: model.format: unknown value 'onnx' (allowed: auto, graphdef, h5, keras, savedmodel, tflite)"),
])
def test_format_specific_model_settings(formats: Path, model_yaml: str, expected: str) -> None:
    path = write(formats, f"version: 1\nmodel:\n{model_yaml}calibration:\n  path: cal.npz\n")
    assert problems(path) == [expected]


def test_bind_values_keep_their_types(formats: Path) -> None:
    path = write(formats, "version: 1\nmodel:\n  path: g.pb\n  bind: {is_training: false, keep_prob: 1.0, "
                          "phase: 0}\ncalibration:\n  path: cal.npz\n")
    bind = load_pipeline(path).model.bind
    assert bind == {"is_training": False, "keep_prob": 1.0, "phase": 0}
    assert [type(v) for v in bind.values()] == [bool, float, int]


def test_a_tflite_model_needs_no_calibration_and_resolves_without_unused_settings(formats: Path) -> None:
    config = load_pipeline(write(formats, "version: 1\nmodel: {path: m.tflite}\ntargets: [arm-neon]\n"))
    assert config.calibration is None
    resolved = yaml.safe_load(resolved_yaml(config, formats))
    assert resolved["model"] == {"path": "m.tflite", "format": "tflite"}
    assert not {"calibration", "passes", "quantization", "verify"} & set(resolved)


@pytest.mark.parametrize("key", ["calibration: {path: cal.npz}", "passes: []", "quantization: {input_type: uint8}",
                                 "verify: {pass_samples: 2}"])
def test_settings_a_tflite_model_ignores_are_errors(formats: Path, key: str) -> None:
    path = write(formats, f"version: 1\nmodel: {{path: m.tflite}}\n{key}\n")
    assert problems(path) == [f"p.yaml:3: {key.split(':')[0]}: does not apply to an existing .tflite model (it is "
                              "checked as it is: no passes, no conversion); remove it"]


def test_pass_options_are_parsed_and_listed(project: Path) -> None:
    path = write(project, MINIMAL + "passes: [strip-training, {name: lower-conv-to-gemm, layers: [conv1, conv2]}]\n")
    passes = load_pipeline(path).passes
    assert [p.name for p in passes] == ["strip-training", "lower-conv-to-gemm"]
    assert passes[1].layers == ("conv1", "conv2")
    bad = write(project, MINIMAL + "passes: [{name: lower-conv-to-gemm, layer: [conv1]}]\n", "bad.yaml")
    assert problems(bad) == ["bad.yaml:6: passes[0]: unknown key 'layer' (allowed: layers); did you mean 'layers'?"]
    listed = run_edgeconv("passes", "list")
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[:2] == [
        "lower-conv-to-gemm: Rewrite Conv2D as im2col patches + MatMul (FULLY_CONNECTED in the .tflite) for targets "
        "without a convolution kernel; 1x1 convolutions become a plain MatMul. The report gives each GEMM's M x K x N.",
        "    option layers: Lower only the convolutions of these source layers (default: all)."]


# -- data sections ---------------------------------------------------------------------------------

@pytest.fixture
def data(project: Path) -> Path:
    (project / "photos").mkdir()
    (project / "photos" / "a.png").write_bytes(b"\x89PNG")
    (project / "runs.csv").write_text("t,ax\n0,1\n")
    (project / "mixed").mkdir()
    (project / "mixed" / "x.npy").write_bytes(b"")
    (project / "mixed" / "y.csv").write_text("")
    (project / "empty").mkdir()
    return project


def with_calibration(section: str, extra: str = "") -> str:
    return f"version: 1\nmodel:\n  path: m.keras\ncalibration:\n{section}{extra}"


@pytest.mark.parametrize(("section", "expected"), [
    ("  path: photos\n",
     "p.yaml:5: calibration: source images needs preprocess: with scale/offset or mean/std (how pixels 0-255 become "
     "the model input)"),
    ("  path: photos\n  preprocess: {scale: 0.5, mean: [1], std: [2]}\n",
     "p.yaml:6: calibration.preprocess: give either scale (and offset) or mean and std, e.g. scale: "
     "0.00392156862745098 for inputs in [0, 1]"),
    ("  path: photos\n  preprocess: {mean: [1, 2], std: [2, 2]}\n",
     "p.yaml:6: calibration.preprocess: mean and std need the same length, 1 or 3 values, and no zero std"),
    ("  path: photos\n  preprocess: {scale: 1.0, size: [32]}\n",
     "p.yaml:6: calibration.preprocess.size: expected [height, width], got [32]"),
    ("  path: cal.npz\n  window: 8\n",
     "p.yaml:6: calibration.window: applies to source csv only (this data is npz)"),
    ("  path: runs.csv\n  columns: {imu: [ax]}\n  preprocess: {scale: 1.0}\n",
     "p.yaml:7: calibration.preprocess: applies to source images and tfrecord only (this data is csv)"),
    ("  path: runs.csv\n",
     "p.yaml:5: calibration: source csv needs columns: {input_name: [column, ...]}"),
    ("  path: mixed\n",
     "p.yaml:5: calibration.path: cannot tell the source of folder 'mixed' (it holds files for npy-dir, csv); set "
     "calibration.source"),
    ("  path: empty\n",
     "p.yaml:5: calibration.path: cannot tell the source of folder 'empty' (it holds no data files); set "
     "calibration.source"),
    ("  source: python\n  function: gen:samples\n",
     "p.yaml:6: calibration.function: runs Python code from the pipeline's folder (gen:samples), which edgeconv does "
     "not do unless the pipeline says so: set trust_code: true if you trust that code"),
    ("  source: python\n  function: gen_samples\n  trust_code: true\n",
     "p.yaml:5: calibration: source python needs function: 'module:function'"),
    ("  source: csvv\n  path: runs.csv\n",
     "p.yaml:5: calibration.source: unknown name 'csvv' (allowed: csv, images, npy, npy-dir, npz, python, "
     "tfrecord); did you mean 'csv'?"),
    ("  path: cal.npz\n  samples: 9\n",
     "p.yaml:6: calibration.samples: 9 samples cannot calibrate a model (at least 10; calibration.min_samples, 100, "
     "is where warnings stop)"),
    ("  path: cal.npz\n  expected_range: {image: [1, 0]}\n",
     "p.yaml:6: calibration.expected_range.image: expected [low, high] with low < high, got [1.0, 0.0]"),
])
def test_data_section_mistakes(data: Path, section: str, expected: str) -> None:
    assert problems(write(data, with_calibration(section))) == [expected]


def test_sources_and_evaluation_preprocessing(data: Path) -> None:
    text = with_calibration("  path: photos\n  preprocess: {scale: 0.00392156862745098, fit: crop}\n",
                            "evaluation:\n  path: photos\n  labels: label\n")
    config = load_pipeline(write(data, text))
    assert resolve_source(config.calibration) == "images"
    assert config.evaluation.preprocess == config.calibration.preprocess  # evaluation images: same preprocessing
    python = with_calibration("  source: python\n  function: gen:samples\n  trust_code: true\n")
    assert load_pipeline(write(data, python, "py.yaml")).calibration.path is None
    resolved = yaml.safe_load(resolved_yaml(load_pipeline(write(data, text, "r.yaml")), data))
    assert set(resolved["calibration"]) == {"path", "source", "input", "preprocess", "samples", "seed",
                                            "min_samples", "expected_range"}


# -- quantization modes ---------------------------------------------------------------------------

@pytest.mark.parametrize(("quantization", "expected"), [
    ("{mode: float16}",
     "p.yaml:6: quantization.mode: float16 is not allowed by target 'generic-int8': Quantization modes: int8; runs "
     "no float ops left in a quantized model (quantization.keep_float). This target is the full-integer 8-bit "
     "quantization specification; a model in another mode is checked by a target that declares that mode. [QS]"),
    ("{mode: int8, keep_float: [dense]}",
     "p.yaml:6: quantization.keep_float: target 'generic-int8' runs no float ops left in a quantized model: "
     "Quantization modes: int8; runs no float ops left in a quantized model (quantization.keep_float). This target "
     "is the full-integer 8-bit quantization specification; a model in another mode is checked by a target that "
     "declares that mode. [QS]"),
    ("{mode: int8, input_type: int16}",
     "p.yaml:6: quantization.input_type: int16 is not a input type of mode int8 (allowed: float32, int8, uint8, or "
     "auto)"),
])
def test_modes_a_target_does_not_allow_are_errors(project: Path, quantization: str, expected: str) -> None:
    assert problems(write(project, MINIMAL + f"quantization: {quantization}\n")) == [expected]


ANY_MODE = """
schema_version: 1
name: any-mode
title: Any mode
sources: {ME: mine}
quantization: {modes: [int8, int16x8, dynamic, float16, none], float_fallback: true, source: ME}
ops: {CONV_2D: {source: ME}}
"""


@pytest.mark.parametrize(("quantization", "io"), [
    ("{mode: int8}", ("int8", "int8")),
    ("{mode: int16x8}", ("int16", "int16")),
    ("{mode: dynamic}", ("float32", "float32")),
    ("{mode: int8, keep_float: [head]}", ("float32", "float32")),
    ("{mode: int8, input_type: uint8, output_type: float32}", ("uint8", "float32")),
])
def test_auto_io_types_follow_the_mode(project: Path, quantization: str, io: tuple[str, str]) -> None:
    (project / "any.yaml").write_text(ANY_MODE)
    config = load_pipeline(write(project, MINIMAL + f"quantization: {quantization}\ntargets: [any.yaml]\n"))
    assert (config.quantization.io("input").value, config.quantization.io("output").value) == io


def test_calibration_is_required_only_for_calibrated_modes(project: Path) -> None:
    (project / "any.yaml").write_text(ANY_MODE)
    bare = "version: 1\nmodel:\n  path: m.keras\ntargets: [any.yaml]\n"
    assert load_pipeline(write(project, bare + "quantization: {mode: dynamic}\n")).calibration is None
    assert problems(write(project, bare + "quantization: {mode: int16x8}\n")) == [
        "p.yaml:1: top level: missing required key 'calibration' (quantization mode int16x8 is calibrated on real "
        "data)"]
    assert problems(write(project, bare + "quantization: {mode: float16, keep_float: [x]}\n")) == [
        "p.yaml:5: quantization.keep_float: applies to modes int8 and int16x8 only (mode is float16)"]


def test_target_quantization_policy_is_validated(project: Path) -> None:
    (project / "bad.yaml").write_text(ANY_MODE.replace("modes: [int8, int16x8, dynamic, float16, none]",
                                                       "modes: [int4]"))
    result = run_edgeconv("check", REPO / "tests" / "data" / "conv2d-relu.int8.tflite", "--target",
                          project / "bad.yaml")
    assert result.returncode == 2
    assert "quantization.modes[0]: unknown mode 'int4' (allowed: dynamic, float16, int16x8, int8, none)" in \
        result.stderr


# -- verification and firmware outputs -----------------------------------------------------------------

@pytest.mark.parametrize(("extra", "expected"), [
    ("gates: {min_sqnr_db: 30}\n",
     "p.yaml:6: gates.min_sqnr_db: needs an evaluation section (the data parity is measured on)"),
    ("output: {golden: {samples: 2}}\n",
     "p.yaml:6: output.golden: needs an evaluation section (golden vectors are real evaluation samples)"),
    ("output: {c_array: {name: 2model}}\n",
     "p.yaml:6: output.c_array.name: '2model' is not a C identifier (letters, digits and _, not starting with a "
     "digit)"),
    ("evaluation: {path: cal.npz}\ngates: {max_accuracy_drop: 0.01}\n",
     "p.yaml:7: gates.max_accuracy_drop: needs labels: set evaluation.labels to the array, feature or column that "
     "holds them"),
    ("evaluation: {path: cal.npz, labels: y}\nverify: {parity: false}\ngates: {min_cosine: 0.99}\n",
     "p.yaml:7: verify.parity: is false, but gates.min_cosine needs the parity measurement"),
    ("evaluation: {path: cal.npz, labels: y}\nverify: {suggest_keep_float: true}\n",
     "p.yaml:7: verify.suggest_keep_float: needs an evaluation section and a parity gate to meet "
     "(gates.max_accuracy_drop, min_top1_agreement, min_sqnr_db or min_cosine)"),
])
def test_verification_settings_need_what_they_measure(project: Path, extra: str, expected: str) -> None:
    found = problems(write(project, MINIMAL + extra))
    assert found[0] == expected


def test_suggest_keep_float_needs_targets_that_run_float(project: Path) -> None:
    text = MINIMAL + ("evaluation: {path: cal.npz, labels: y}\nverify: {suggest_keep_float: true}\n"
                      "gates: {min_top1_agreement: 0.99}\n")
    assert problems(write(project, text)) == [
        "p.yaml:7: verify.suggest_keep_float: target 'generic-int8' runs no float ops left in a quantized model: "
        "Quantization modes: int8; runs no float ops left in a quantized model (quantization.keep_float). This "
        "target is the full-integer 8-bit quantization specification; a model in another mode is checked by a "
        "target that declares that mode. [QS]"]


@pytest.mark.parametrize(("extra", "expected"), [
    ("output: {onnx: {opset: 19}}\n",
     "p.yaml:6: output.onnx.opset: opset 19 is not supported (allowed: 13 to 18: tf2onnx writes up to 18, "
     "per-channel QuantizeLinear needs 13)"),
    ("output: {onnx: {opset: 11}}\n",
     "p.yaml:6: output.onnx.opset: opset 11 is not supported (allowed: 13 to 18: tf2onnx writes up to 18, "
     "per-channel QuantizeLinear needs 13)"),
    ("output: {onnx: {opset: seventeen}}\n", "p.yaml:6: output.onnx.opset: expected an integer, got 'seventeen'"),
    ("output: {onnx: {opst: 17}}\n", "p.yaml:6: output.onnx: unknown key 'opst' (allowed: opset, quantized); "
     "did you mean 'opset'?"),
    ("quantization: {mode: float16}\ntargets: [cpu.yaml]\noutput: {onnx: {quantized: true}}\n",
     "p.yaml:8: output.onnx.quantized: the INT8 ONNX model is converted from the int8 .tflite, but "
     "quantization.mode is 'float16' (remove quantized, or set it to false)"),
])
def test_onnx_output_mistakes(project: Path, extra: str, expected: str) -> None:
    (project / "cpu.yaml").write_text(textwrap.dedent("""
        schema_version: 1
        name: cpu-any
        title: any mode
        sources: {ME: "mine"}
        quantization: {modes: [int8, float16], float_fallback: true, source: ME}
        unlisted: {source: ME}
        ops: {}
    """))
    assert problems(write(project, MINIMAL + extra)) == [expected]


def test_onnx_output_defaults_and_a_tflite_model(project: Path, formats: Path) -> None:
    config = load_pipeline(write(project, MINIMAL + "output: {onnx: {}}\n"))
    assert config.output.onnx is not None and config.output.onnx.opset == 17 and config.output.onnx.quantized is None
    path = write(formats, "version: 1\nmodel: {path: m.tflite}\noutput: {onnx: {}}\n", name="t.yaml")
    assert problems(path) == ["t.yaml:3: output.onnx: needs a TensorFlow model: an existing .tflite is only checked "
                              "(ONNX is exported from the cleaned TensorFlow graph)"]


def test_onnx_output_without_the_extra_is_a_config_error_with_the_install_hint(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tf2onnx" else real(name, *a))
    path = write(project, MINIMAL + "output: {onnx: {}}\n")
    assert problems(path) == ["p.yaml:6: output.onnx: needs onnx, onnxruntime and tf2onnx, which are not installed: "
                              "pip install 'edgeconv[onnx]'"]
    assert main(["validate", str(path)]) == 2


def _installed(key: str) -> str:
    from edgeconv.config import toolchain_version

    version = toolchain_version(key)
    assert version is not None
    return version


@pytest.mark.parametrize(("requires", "expected"), [
    ("{tensorflow: '>=99'}", "p.yaml:6: requires.tensorflow: the installed tensorflow {tensorflow} is outside '>=99': "
     "a different toolchain changes the bytes and sometimes the accuracy; install a matching version or change "
     "requires"),
    ("{numpy: '<1'}", "p.yaml:6: requires.numpy: the installed numpy {numpy} is outside '<1': a different toolchain "
     "changes the bytes and sometimes the accuracy; install a matching version or change requires"),
    ("{tensorflw: '>=2'}", "p.yaml:6: requires.tensorflw: unknown toolchain part 'tensorflw' (allowed: "
     "ai-edge-litert, ai-edge-quantizer, edgeconv, ethos-u-vela, keras, numpy, onnx, onnxruntime, python, tensorflow, "
     "tf2onnx); did you "
     "mean 'tensorflow'?"),
    ("{keras: 'three'}", "p.yaml:6: requires.keras: 'three' is not a version specifier (e.g. '>=2.20,<2.22')"),
])
def test_requires_refuses_a_toolchain_outside_it(project: Path, requires: str, expected: str) -> None:
    path = write(project, MINIMAL + f"requires: {requires}\n")
    assert problems(path) == [expected.format(tensorflow=_installed("tensorflow"), numpy=_installed("numpy"))]
    assert main(["validate", str(path)]) == 2


def test_requires_accepts_the_installed_toolchain_and_it_is_what_the_report_records(project: Path) -> None:
    from edgeconv.config import toolchain_version

    tf = _installed("tensorflow")
    major, minor = (int(p) for p in tf.split(".")[:2])
    config = load_pipeline(write(project, MINIMAL + f"requires: {{tensorflow: '>={major}.{minor},<{major}.{minor + 1}'"
                                 f", python: '>=3.11'}}\n"))
    assert config.requires == {"tensorflow": f">={major}.{minor},<{major}.{minor + 1}", "python": ">=3.11"}
    assert toolchain_version("edgeconv") == edgeconv_version()


def edgeconv_version() -> str:
    from edgeconv import __version__

    return __version__


def test_regression_gates_name_the_pipelines_targets(project: Path) -> None:
    path = write(project, MINIMAL + "targets: [generic-int8, edgetpu]\ngates: {no_new_fallback: [edgetpu, edge-tpu]}\n")
    assert problems(path) == ["p.yaml:7: gates.no_new_fallback[1]: 'edge-tpu' is not one of the pipeline's targets "
                              "(edgetpu, generic-int8); did you mean 'edgetpu'?"]
    config = load_pipeline(write(project, MINIMAL + "gates: {max_size_growth: 0.05}\n", name="ok.yaml"))
    assert config.gates.regression.names == ["gates.max_size_growth"]


def test_repair_keeps_the_lines_of_loosened_gate_notes(tmp_path: Path) -> None:
    """--repair and each repair trial change the pipeline with replace(): the notes of loosened default gates
    keep their file and line (dataclasses.replace dropped them: the line was an undeclared attribute)."""
    import numpy as np

    from edgeconv.gates import gate_limits
    from edgeconv.verify.repair import apply
    from edgeconv.verify.stage import with_repair

    (tmp_path / "m.keras").write_bytes(b"x")
    np.savez(tmp_path / "c.npz", x=np.zeros((40, 3), np.float32))
    np.savez(tmp_path / "e.npz", x=np.zeros((40, 3), np.float32), label=np.zeros(40))
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: m.keras}\ncalibration: {path: c.npz, samples: 20, "
                                     "min_samples: 10}\nevaluation: {path: e.npz, labels: label}\n"
                                     "gates:\n  max_accuracy_drop: 0.2\n")
    config = load_pipeline(tmp_path / "p.yaml")
    notes = gate_limits(config).notes
    assert [(n.key, n.file, n.line) for n in notes] == [("gates.max_accuracy_drop", tmp_path / "p.yaml", 6)]
    assert notes[0].sentence.endswith("p.yaml line 6)"), notes
    for changed in (with_repair(config), apply(config, {"quantization": {"per_channel": False}})):
        assert changed.source == config.source and changed.gate_lines == config.gate_lines
        assert gate_limits(changed).notes == notes


@pytest.mark.parametrize(("gates", "expected"), [
    ("gates:\n  disable: [agreement, calibration]\n",
     [("gates.disable", 6, "default gate 'agreement' disabled in p.yaml line 6 (gates.disable)"),
      ("gates.disable", 6, "default gate 'calibration' disabled in p.yaml line 6 (gates.disable)")]),
    ("verify: {parity: false}\n",
     [("verify.parity", 5, "the agreement and accuracy gates are not checked: verify.parity is false in p.yaml "
                           "line 5")]),
    ("gates:\n  min_sqnr_db: 19.5\n  min_top1_agreement: 0.9\n",
     [("gates.min_sqnr_db", 6, "gates.min_sqnr_db = 19.5 is looser than the default 20 (p.yaml line 6)")]),
    ("targets: [edgetpu]\ngates:\n  min_supported_mac_share: {edgetpu: 0.49}\n",
     [("gates.min_supported_mac_share.edgetpu", 7, "gates.min_supported_mac_share.edgetpu = 0.49 is looser than "
       "the default 0.5 for an accelerator (p.yaml line 7)")]),
    ("gates:\n  min_sqnr_db: 20\n  min_top1_agreement: 0.9\n", []),
    ("gates:\n  max_accuracy_drop: 0.03\n", []),  # at the default: not looser
    ("gates:\n  max_accuracy_drop: 0.0301\n",
     [("gates.max_accuracy_drop", 6, "gates.max_accuracy_drop = 0.0301 is looser than the default 0.03 (p.yaml "
                                     "line 6)")]),
    ("targets: [edgetpu]\ngates:\n  min_supported_mac_share: {edgetpu: 0.5}\n", []),
    ("gates:\n  min_sqnr_db: {boxes: 15, scores: 20}\n",
     [("gates.min_sqnr_db.boxes", 6, "gates.min_sqnr_db.boxes = 15 is looser than the default 20 for output 'boxes' "
                                    "(p.yaml line 6)")]),
    ("gates:\n  min_top1_agreement: {label: 0.9}\n", []),
    ("gates:\n  uncertain: warn\n",
     [("gates.uncertain", 6, "gates.uncertain = warn is looser than the default fail: an op an accelerator may not "
                             "run passes (p.yaml line 6)")]),
])
def test_each_loosened_default_names_its_key_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          gates: str, expected: list[tuple[str, int, str]]) -> None:
    """Every default a pipeline loosens or turns off is a note with the key, the file and the line that do it
    (just at the default is not looser: no note)."""
    import numpy as np

    from edgeconv.gates import gate_limits

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.keras").write_bytes(b"x")
    np.savez(tmp_path / "c.npz", x=np.zeros((40, 3), np.float32), label=np.zeros(40))
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: m.keras}\ncalibration: {path: c.npz, samples: 20, "
                                     "min_samples: 10}\nevaluation: {path: c.npz, labels: label}\n" + gates)
    notes = gate_limits(load_pipeline(tmp_path / "p.yaml")).notes
    assert [(n.key, n.line, n.sentence) for n in notes] == expected
    assert all(n.file == tmp_path / "p.yaml" and str(n) == n.sentence for n in notes)
