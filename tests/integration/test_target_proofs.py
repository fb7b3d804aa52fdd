"""Target predictions against real runtimes on real conversions.

TFLM: the tflite-micro Python interpreter (reference kernels) on every committed model.
keras.applications MobileNetV2, MobileNetV3Small and EfficientNetB0, built by edgeconv with a
static batch: XNNPACK's decisions and TFLM's. Edge TPU: Keras models whose answer the Coral
documentation makes certain.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv.cli import main
from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.targets import load_target
from edgeconv.targets.checker import check_model
from edgeconv.targets.target import OpStatus

from ..conftest import REPO
from ..oracles import CORPUS, compare_tflm, known_differences, tflm_failed_op, tflm_runs, xnnpack_delegated
from .models import photos


def assert_tflm_agrees(path: Path) -> None:
    """Predicted unsupported ops <=> TFLM refuses the model, and TFLM's named op is among them."""
    runs, log = tflm_runs(path)
    result = check_model(read_tflite(path), load_target("tflm-cmsis-nn"))
    unsupported = {r.op.type for r in result.ops if r.status is OpStatus.UNSUPPORTED}
    assert runs == (not unsupported), (unsupported, log[-800:])
    named = tflm_failed_op(log)
    if not runs and named is not None:
        assert named in unsupported, (named, unsupported)


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_tflm_predicts_what_tflite_micro_refuses(path: Path) -> None:
    """On the whole corpus: TFLM runs the model <=> no op is unsupported, and the op TFLM names is one
    edgeconv calls unsupported; known differences are listed with why."""
    found = compare_tflm(path)
    wrong = sorted({*found["false_supported"], *found["false_unsupported"]})  # type: ignore[misc]
    if not found["exact"] and not wrong:
        wrong = [f"TFLM names {found['named']}"]
    assert wrong == known_differences().get((path.name, "tflm-cmsis-nn"), []), found


def test_vela_places_ops_without_outputs_by_what_they_read() -> None:
    """ASSIGN_VARIABLE and CALL_ONCE write no tensor: they are matched to Vela's output by type and inputs."""
    result = check_model(read_tflite(REPO / "tests" / "data" / "thirdparty" / "pymicro_wakeword-alexa.tflite"),
                         load_target("ethos-u55-128"))
    no_outputs = [r for r in result.ops if not r.op.outputs]
    assert {r.op.type for r in no_outputs} == {"ASSIGN_VARIABLE", "CALL_ONCE"}
    assert {r.status for r in no_outputs} == {OpStatus.CPU_FALLBACK}
    assert result.counts()["supported"] > 0


# -- keras.applications through edgeconv ------------------------------------------------------

APPS = {
    "mobilenet_v2": ("MobileNetV2", {"alpha": 0.35}),
    "mobilenet_v3_small": ("MobileNetV3Small", {"include_preprocessing": False}),
    "efficientnet_b0": ("EfficientNetB0", {}),
}
TARGETS = ["generic-int8", "arm-neon", "edgetpu", "tflm-cmsis-nn"]


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three architectures (untrained weights, seeded), built by edgeconv at 96x96, batch 1."""
    import keras

    root = tmp_path_factory.mktemp("apps")
    built = {}
    for name, (cls, kwargs) in APPS.items():
        keras.utils.set_random_seed(0)
        model = getattr(keras.applications, cls)(input_shape=(96, 96, 3), weights=None, **kwargs)
        model.save(root / f"{name}.keras")
        input_name = model.inputs[0]._keras_history.operation.name
        data = np.random.default_rng(0).uniform(-1, 1, (16, 96, 96, 3)).astype(np.float32)
        np.savez(root / f"{name}.npz", **{input_name: data})
        (root / f"{name}.yaml").write_text(
            f"version: 1\nmodel: {{path: {name}.keras}}\ncalibration: {{path: {name}.npz, samples: 16}}\n"
            f"targets: [{', '.join(TARGETS)}]\nverify: {{parity: false, culprits: 0}}\n")  # the ops are what is proven
        assert main(["build", str(root / f"{name}.yaml"), "-q"]) in (0, 1)
        built[name] = root / "build" / name / f"{name}.tflite"
    return built


@pytest.mark.parametrize("name", list(APPS))
def test_arm_neon_matches_xnnpack_on_real_architectures(apps: dict[str, Path], name: str) -> None:
    result = check_model(read_tflite(apps[name]), load_target("arm-neon"))
    predicted = [(r.op.index, r.op.type, r.status is OpStatus.SUPPORTED) for r in result.ops]
    assert predicted == xnnpack_delegated(apps[name])


@pytest.mark.parametrize("name", list(APPS))
def test_tflm_matches_tflite_micro_on_real_architectures(apps: dict[str, Path], name: str) -> None:
    assert_tflm_agrees(apps[name])


def test_untrained_logits_would_abort_tflm_softmax(apps: dict[str, Path]) -> None:
    """Untrained weights give near-constant logits; TFLM's int8 softmax aborts on such an input scale."""
    report = json.loads((apps["mobilenet_v2"].parent / "report.json").read_text())
    tflm = next(t for t in report["targets"] if t["name"] == "tflm-cmsis-nn")
    (softmax,) = [op for op in tflm["ops"] if op["type"] == "SOFTMAX"]
    assert softmax["status"] == "unsupported"
    assert [v["rule"] for v in softmax["violations"] if v["effect"] == "unsupported"] == [
        "tflm-cmsis-nn.SOFTMAX.softmax_input_scale"]


def test_edgetpu_stops_mobilenet_v3_at_hard_swish(apps: dict[str, Path]) -> None:
    """HARD_SWISH is not in the Edge TPU table: MobileNetV3 maps only its first conv."""
    result = check_model(read_tflite(apps["mobilenet_v3_small"]), load_target("edgetpu"))
    assert result.first_blocking is not None and result.first_blocking.op.type == "HARD_SWISH"
    assert result.counts()["supported"] == 1 and result.shares()["macs"] < 0.1


# -- generic-int8's notes on float islands ---------------------------------------------------------

def _generic_int8(tmp_path: Path, name: str, build: Any, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    import keras

    keras.utils.set_random_seed(5)
    inp = keras.Input((9, 8, 3), batch_size=1, name="x")
    keras.Model(inp, build(inp)).save(tmp_path / f"{name}.keras")
    np.savez(tmp_path / f"{name}.npz", x=photos(16, 9, 8))
    (tmp_path / f"{name}.yaml").write_text(f"version: 1\nmodel: {{path: {name}.keras}}\n"
                                           f"calibration: {{path: {name}.npz, samples: 16}}\n"
                                           "targets: [generic-int8]\nverify: {parity: false, culprits: 0}\n")
    main(["build", str(tmp_path / f"{name}.yaml"), "-q"])
    capsys.readouterr()
    return dict(json.loads((tmp_path / "build" / name / "report.json").read_text())["targets"][0])


def test_generic_int8_float_island_notes_name_a_fix_that_converts(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """ELU, Keras LayerNormalization (a NEG) and GroupNormalization (a NEG and a SQUARE) stay float in TF
    2.21's converter: each op's violation is the target's note, with the layer it came from; the layers the
    notes' fixes name instead (LeakyReLU, a normalization by hand, x * x) convert to int8 throughout."""
    from keras import layers, ops

    def islands(x: Any) -> Any:
        x = layers.ELU(name="elu")(layers.Conv2D(6, 3, name="conv")(x))
        x = layers.GroupNormalization(2, name="gn")(layers.LayerNormalization(name="ln")(x))
        return layers.Dense(3, name="head")(layers.GlobalAveragePooling2D(name="gap")(x))

    failed = _generic_int8(tmp_path, "islands", islands, capsys)
    notes = load_target("generic-int8").notes
    seen: dict[str, list[str]] = {}
    for op in failed["ops"]:
        if op["type"] in ("ELU", "NEG", "SQUARE"):
            (violation,) = op["violations"]
            assert (violation["rule"], violation["detail"], violation["fix"]) == (
                f"generic-int8.{op['type']}.op_listed", notes[op["type"]].detail, notes[op["type"]].fix)
            seen.setdefault(op["type"], []).extend(op["source_layers"])
    assert failed["verdict"] == "fail" and seen == {"ELU": ["elu"], "NEG": ["ln", "gn"], "SQUARE": ["gn"]}

    def fixed(x: Any) -> Any:
        x = layers.LeakyReLU(0.2, name="leaky")(layers.Conv2D(6, 3, name="conv")(x))
        d = x - ops.mean(x, axis=-1, keepdims=True)  # LayerNormalization by hand, as the NEG note says
        x = d * ops.rsqrt(ops.mean(d * d, axis=-1, keepdims=True) + 1e-3)
        x = x * x  # the SQUARE note's fix
        return layers.Dense(3, name="head")(layers.GlobalAveragePooling2D(name="gap")(x))

    passed = _generic_int8(tmp_path, "fixed", fixed, capsys)
    assert passed["verdict"] == "pass" and passed["counts"]["unsupported"] == 0
    assert {op["type"] for op in passed["ops"]} >= {"LEAKY_RELU", "SUB", "MUL", "RSQRT"}
    assert not {op["type"] for op in passed["ops"]} & {"ELU", "NEG", "SQUARE", "DEQUANTIZE", "QUANTIZE"}


# -- Edge TPU cases the Coral documentation decides ----------------------------------------------

def _edgetpu(tmp_path: Path, build: Any, shape: tuple[int, ...], capsys: pytest.CaptureFixture[str],
             code: int = 0) -> dict[str, Any]:
    """Built with synthetic (noise) calibration on purpose: the calibration gate is turned off."""
    import keras

    keras.utils.set_random_seed(3)
    inp = keras.Input(shape[1:], batch_size=shape[0], name="x")
    keras.Model(inp, build(inp)).save(tmp_path / "m.keras")
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(1).uniform(-1, 1, (16 * shape[0], *shape[1:]))
             .astype(np.float32))
    (tmp_path / "p.yaml").write_text(f"version: 1\nmodel: {{path: m.keras, batch_size: {shape[0]}}}\n"
                                     f"calibration: {{path: cal.npz, samples: {16 * shape[0]}}}\n"
                                     "targets: [edgetpu]\ngates: {disable: [calibration]}\n")
    assert main(["build", str(tmp_path / "p.yaml"), "-q"]) == code, capsys.readouterr().err
    report = json.loads((tmp_path / "build" / "m" / "report.json").read_text())
    return dict(report["targets"][0])


def test_edgetpu_pool_with_fused_activation_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Coral table: MaxPool2d "No fused activation function" (relu(maxpool) fuses into MAX_POOL_2D)."""
    from keras import layers

    def build(x: Any) -> Any:
        x = layers.Conv2D(5, 3, name="conv")(x)
        x = layers.ReLU(name="after_pool")(layers.MaxPooling2D(name="pool")(x))
        return layers.Dense(3, name="head")(layers.Flatten(name="flat")(x))

    target = _edgetpu(tmp_path, build, (1, 10, 9, 2), capsys)
    blocking = target["first_blocking_op"]
    assert (blocking["type"], blocking["rules"]) == ("MAX_POOL_2D", ["edgetpu.MAX_POOL_2D.fused_activation"])
    assert blocking["reasons"] == ["fused activation RELU"] and blocking["source_layers"] == ["after_pool", "pool"]
    assert [op["type"] for op in target["ops"] if op.get("follows_blocking_op")] == ["RESHAPE", "FULLY_CONNECTED"]


def test_edgetpu_batch_two_maps_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Coral requirements: more than 3 dimensions larger than 1 (batch 2) is not mapped."""
    from keras import layers

    # Nothing on the Edge TPU: the default accelerator gate fails the build.
    target = _edgetpu(tmp_path, lambda x: layers.Conv2D(4, 3, name="conv")(x), (2, 7, 6, 3), capsys, code=1)
    assert target["counts"] == {"supported": 0, "uncertain": 0, "cpu_fallback": 1, "unsupported": 0}
    assert target["first_blocking_op"] is None
    assert [v["rule"] for v in target["ops"][0]["violations"]] == ["edgetpu.CONV_2D.tensor_outer_dims_one"]
    assert target["shares"] == {"ops": 0.0, "macs": 0.0}


@pytest.mark.parametrize(("mode", "folder"), [("int8", "ops"), ("int16x8", "ops16")])
def test_committed_op_models_are_what_the_generator_makes(tmp_path: Path, mode: str, folder: str) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_op_models", REPO / "scripts" / "make_op_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = {p.name.removesuffix(f".{mode}.tflite") for p in (REPO / "tests" / "data" / folder).glob("*.tflite")}
    assert committed == (set(module.cases()) if mode == "int8" else set(module.INT16X8))

    def shape(path: Path) -> list[Any]:
        return [(op.label, op.version, [(t.dtype, t.shape) for t in op.inputs if t], [t.dtype for t in op.outputs])
                for op in read_tflite(path).ops]

    # Run as it is run to make them: a fresh process. (In the test process, after the rest of the suite,
    # TF 2.21's converter once quantized UNPACK fully where a fresh process keeps it float: an
    # in-process order effect of TensorFlow, not of the generator.)
    import subprocess
    import sys

    subprocess.run([sys.executable, str(REPO / "scripts" / "make_op_models.py"), "--mode", mode, "--out",
                    str(tmp_path)], check=True, capture_output=True)
    for name in sorted(committed):
        fresh = tmp_path / f"{name}.{mode}.tflite"
        assert shape(fresh) == shape(REPO / "tests" / "data" / folder / f"{name}.{mode}.tflite"), name


def test_check_on_a_real_network_is_fast_and_needs_no_tensorflow(apps: dict[str, Path]) -> None:
    import subprocess
    import sys
    import time

    probe = "import sys; from edgeconv.cli import main; code = main(sys.argv[1:]); " \
            "sys.exit(3 if 'tensorflow' in sys.modules else code)"
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", probe, "check", str(apps["efficientnet_b0"]), "--target", "edgetpu",
                             "--target", "arm-neon", "--format", "json"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)[0]["ops"]) == 239
    assert elapsed < 1.5, f"check took {elapsed:.2f} s"
