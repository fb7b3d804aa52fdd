"""Every model format a firmware team has, each converted for real: TF1 frozen graphs with
a training switch (v1 and v2 control flow), TF1 and TF2 SavedModels, a real Keras 2.0.5
.h5, a subclassed Keras 3 model, and an existing .tflite.

Each build must end in a .tflite with no random, Flex, IF or BOOL-input ops whose
outputs match the model in inference mode; each refusal names what to fix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

import edgeconv
from edgeconv import ModelError
from edgeconv.cli import main
from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.report import SCHEMA_PATH

from ..conftest import REPO
from . import models

FER = REPO / "tests" / "data" / "fer" / "emotion_model.hdf5"
IMAGE = (6, 5, 3)  # the TF1 fixture's input, distinct sizes so a transposed shape cannot pass
FORBIDDEN_OPS = {"IF", "WHILE", "RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "CUSTOM"}


def tf1_fixture(out: Path, *args: str) -> Path:
    """Write a TF1 graph (or TF1 SavedModel) with tests/fixtures/tf1_graph.py in its own process."""
    subprocess.run([sys.executable, "-m", "tests.fixtures.tf1_graph", str(out), *args], cwd=REPO, check=True,
                   capture_output=True)
    return out


@pytest.fixture(scope="module")
def tf1(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The TF1 graphs, written by two processes at once (one per control flow version: each graph is built
    as alone; one TensorFlow import per process instead of one per graph)."""
    folder = tmp_path_factory.mktemp("tf1")
    graphs = {"v1": folder / "v1.pb", "v2": folder / "v2.pb", "keep_prob": folder / "keep_prob.pb",
              "learning_phase": folder / "learning_phase.pb", "savedmodel": folder / "tf1_savedmodel"}
    v1 = [str(graphs["v1"]), "--control-flow", "v1", "--", str(graphs["keep_prob"]), "--switch", "keep_prob", "--",
          str(graphs["learning_phase"]), "--switch", "learning_phase", "--", str(graphs["savedmodel"]),
          "--saved-model"]
    running = [subprocess.Popen([sys.executable, "-m", "tests.fixtures.tf1_graph", *args], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for args in (v1, [str(graphs["v2"]), "--control-flow", "v2"])]
    for proc in running:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    return graphs


def images(samples: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(samples, *IMAGE)).astype(np.float32)


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages show paths relative to the working folder, as a user running edgeconv there sees them."""
    monkeypatch.chdir(tmp_path)


def project(tmp_path: Path, model: Path, model_yaml: str = "", *, cal: dict[str, np.ndarray] | None = None,
            targets: str = "generic-int8", extra: str = "") -> Path:
    """A pipeline next to a copy of ``model`` and its calibration data."""
    target = tmp_path / model.name
    if target == model:
        pass
    elif model.is_dir():
        shutil.copytree(model, target)
    else:
        shutil.copy(model, target)
    np.savez(tmp_path / "cal.npz", **(cal if cal is not None else {"image": images(24)}))
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"version: 1\nmodel:\n  path: {model.name}\n{model_yaml}"
                    f"calibration: {{path: cal.npz, samples: 16}}\n"
                    f"targets: [{targets}]\n{extra}")
    return path


def tf1_session_outputs(pb: Path, x: np.ndarray, feeds: dict[str, Any]) -> np.ndarray:
    """The TF1 graph run the TF1 way, with the training switch fed: the ground truth."""
    import tensorflow as tf

    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(pb.read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as session:
        return np.asarray(session.run("probs:0", {"image:0": x, **{f"{k}:0": v for k, v in feeds.items()}}))


def assert_clean_tflite(path: Path) -> None:
    model = read_tflite(path)
    types = {op.type for op in model.ops}
    assert not types & FORBIDDEN_OPS, types
    assert all(t.dtype.value != "bool" for t in (model.main.tensors[i] for i in model.main.inputs))


# -- TF1 frozen graphs -------------------------------------------------------------------------

@pytest.mark.parametrize(("graph", "conds"), [
    ("v1", "tf.cond 'bn1/cond' (Switch/Merge), tf.cond 'drop1/cond' (Switch/Merge)"),
    ("v2", "tf.cond 'bn1/cond' (If), tf.cond 'drop1/cond' (If)"),
])
def test_unbound_training_placeholder_is_refused_with_exit_2(tf1: dict[str, Path], tmp_path: Path, graph: str,
                                                             conds: str, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = project(tmp_path, tf1[graph])
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["build", str(pipeline), "-q"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"edgeconv: error: placeholder 'is_training' (bool) is not bound and switches training behaviour: it "
        f"decides {conds}; edgeconv will not guess its inference value. Fix: bind it in the pipeline file, "
        "model.bind: {is_training: false}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


@pytest.mark.parametrize("graph", ["v1", "v2"])
def test_bound_tf1_graph_builds_clean_and_matches_tf1_inference(tf1: dict[str, Path], tmp_path: Path,
                                                                graph: str) -> None:
    pipeline = project(tmp_path, tf1[graph], "  bind: {is_training: false}\n")
    result = edgeconv.build(pipeline)
    assert result.passed
    report = result.report
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert_clean_tflite(result.tflite_path)
    assert report["model"]["inputs"] == [{"name": "image", "shape": [1, *IMAGE], "dtype": "float32"}]
    assert report["model"]["outputs"] == [{"name": "probs", "shape": [1, 3], "dtype": "float32"}]
    assert report["model"]["notes"] == ["placeholder 'is_training' bound to false (model.bind)",
                                        "outputs not set; using the graph's sink nodes: probs"]
    assert report["equivalence"]["max_abs_diff"] <= 1e-5
    (strip,) = report["passes"]
    assert strip["removed_by_layer"]["drop1"]["RandomUniform"] == 1
    assert strip["removed_by_layer"]["bn1"]["FusedBatchNormV3"] == 1  # the batch-statistics branch
    assert {tuple(r["layers"]) for r in strip["rewrites"]} == {("bn1",), ("drop1",)}
    if graph == "v1":
        assert strip["removed"]["Switch"] == 12 and strip["removed"]["Merge"] == 2
        assert "tf.cond 'bn1/cond' (Switch/Merge) folded: kept its false branch (is_training=false), dropped " \
               "the other" in [r["description"] for r in strip["rewrites"]]
    else:
        assert strip["removed"]["If"] + strip["removed"].get("StatelessIf", 0) == 2
    assert "FusedBatchNormV3" in strip["ops_after"]  # the inference batch norm, with moving statistics
    # Ground truth: the original graph run by a TF1 session with is_training fed False.
    x = images(5, seed=7)
    want = tf1_session_outputs(tf1[graph], x, {"is_training": False})
    got = np.concatenate([models.run_tflite(result.tflite_path, {"image": xi[None]})["probs"] for xi in x])
    np.testing.assert_allclose(got, want, atol=0.04)  # int8 softmax: output step 1/256, plus rounding upstream
    training = tf1_session_outputs(tf1[graph], x, {"is_training": True})
    assert np.abs(training - want).max() > 0.1  # the tolerance tells training mode apart
    resolved = (result.output_dir / "pipeline.resolved.yaml").read_text()
    assert "  inputs: [image]\n  outputs: [probs]\n  bind: {is_training: false}\n" in resolved


def test_training_mode_bound_true_is_refused_naming_the_batch_norm(tf1: dict[str, Path], tmp_path: Path) -> None:
    pipeline = project(tmp_path, tf1["v1"], "  bind: {is_training: true}\n")
    with pytest.raises(ModelError) as err:
        edgeconv.build(pipeline)
    assert str(err.value) == (
        "FusedBatchNormV3 'bn1/cond/FusedBatchNormV3' (layer 'bn1') normalises with the statistics of each batch "
        "(is_training=true): batch norm in training mode, and the graph does not say which moving statistics "
        "inference should use. Fix: export the graph with is_training=False, or bind the placeholder that "
        "selects training mode (model.bind)")
    assert not (tmp_path / "build").exists()


def test_keep_prob_and_learning_phase_must_be_bound(tf1: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(ModelError) as err:
        edgeconv.build(project(tmp_path / "a", tf1["keep_prob"]))
    assert str(err.value).splitlines()[0].startswith("placeholder 'is_training' (bool) is not bound")
    assert str(err.value).splitlines()[1] == (
        "placeholder 'drop1/keep_prob' (numeric) is not bound and switches training behaviour: it decides the "
        "dropout at 'drop1/dropout/GreaterEqual' (it meets random values there); edgeconv will not guess its "
        "inference value. Fix: bind it in the pipeline file, model.bind: {drop1/keep_prob: 1.0}")
    (tmp_path / "b").mkdir()
    with pytest.raises(ModelError, match=r"^placeholder 'keras_learning_phase' \(bool\) is not bound"):
        edgeconv.build(project(tmp_path / "b", tf1["learning_phase"]))


@pytest.mark.parametrize(("graph", "bind", "rewrite"), [
    ("keep_prob", "{is_training: false, drop1/keep_prob: 1.0}",
     "inverted dropout (RealDiv by the keep probability, then SelectV2 by a random mask) replaced by its input"),
    ("learning_phase", "{keras_learning_phase: false}",
     "tf.cond 'drop1/cond' (Switch/Merge) folded: kept its false branch (keras_learning_phase=false), dropped "
     "the other"),
])
def test_bound_keep_prob_and_learning_phase_build_clean(tf1: dict[str, Path], tmp_path: Path, graph: str,
                                                        bind: str, rewrite: str) -> None:
    result = edgeconv.build(project(tmp_path, tf1[graph], f"  bind: {bind}\n"))
    assert result.passed
    assert_clean_tflite(result.tflite_path)
    assert result.report["equivalence"]["max_abs_diff"] <= 1e-5
    assert rewrite in [r["description"] for r in result.report["passes"][0]["rewrites"]]


@pytest.mark.parametrize(("model_yaml", "message"), [
    ("  bind: {is_trainin: false}\n",
     "model.bind: 'is_trainin' is not in the graph (placeholders of v1.pb: image, is_training); did you mean "
     "'is_training'?"),
    ("  bind: {probs: false}\n",
     "model.bind: 'probs' is a Softmax node, not a placeholder (placeholders of v1.pb: image, is_training)"),
    ("  bind: {is_training: 0.5}\n",
     "model.bind: 'is_training' is a bool placeholder; bind it to true or false, not 0.5"),
    ("  bind: {image: 1.0}\n",
     "model.bind: 'image' has shape (None, 6, 5, 3); only scalar placeholders can be bound"),
    ("  bind: {is_training: false}\n  inputs: [imag]\n",
     "model.inputs: 'imag' is not in the graph; inputs are placeholders (image, is_training); did you mean "
     "'image'?"),
    ("  bind: {is_training: false}\n  inputs: [image, is_training]\n",
     "model.inputs: 'is_training' is bound to a constant by model.bind; it cannot also be an input"),
    ("  bind: {is_training: false}\n  outputs: [prob]\n",
     "model.outputs: 'prob' is not a node of the graph; did you mean 'probs'?"),
    ("  bind: {is_training: false}\n  outputs: ['probs:3']\n",
     "model.outputs: 'probs:3': node 'probs' has no such output"),
    ("  bind: {is_training: false}\n  input_shapes: {image: [1, 6, 5, 4]}\n",
     "model.input_shapes.image: [1, 6, 5, 4] does not fit the model's input shape (None, 6, 5, 3)"),
])
def test_graphdef_configuration_mistakes(tf1: dict[str, Path], tmp_path: Path, model_yaml: str,
                                         message: str) -> None:
    with pytest.raises(ModelError) as err:
        edgeconv.build(project(tmp_path, tf1["v1"], model_yaml))
    assert str(err.value) == message
    assert not (tmp_path / "build").exists()


def test_graph_with_variables_and_non_graphs_are_refused(tmp_path: Path) -> None:
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.compat.v1.Variable(np.ones((4, 2), np.float32), name="w", use_resource=False)
        tf.matmul(x, w, name="y")
    (tmp_path / "a").mkdir()
    unfrozen = tmp_path / "unfrozen.pb"
    unfrozen.write_bytes(graph.as_graph_def().SerializeToString())
    with pytest.raises(ModelError) as err:
        edgeconv.build(project(tmp_path / "a", unfrozen, cal={"x": np.ones((20, 4), np.float32)}))
    assert str(err.value) == ("a/unfrozen.pb: the graph still holds variables (w); it is not frozen. Freeze it "
                              "(tf.compat.v1.graph_util.convert_variables_to_constants) or load the SavedModel")
    (tmp_path / "b").mkdir()
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"\x00not a graph\xff" * 10)
    with pytest.raises(ModelError, match=r"^b/garbage.pb: not a binary TensorFlow GraphDef \(a frozen graph .pb\)$"):
        edgeconv.build(project(tmp_path / "b", garbage))


def _dense_graph(path: Path, batch: int | None, *, mixes_samples: bool) -> Path:
    """A frozen dense layer on 6 features (4 outputs); ``mixes_samples``: it first subtracts the mean over
    the whole feed, batch included (per sample at batch 1, across samples at more)."""
    import tensorflow as tf

    rng = np.random.default_rng(2)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [batch, 6], name="x")
        h = x - tf.reduce_mean(x) if mixes_samples else x
        tf.nn.tanh(tf.matmul(h, rng.normal(size=(6, 4)).astype(np.float32)) + 0.1, name="y")
    path.write_bytes(graph.as_graph_def().SerializeToString())
    return path


@pytest.mark.parametrize(("batch", "mixes_samples", "any_batch", "runs"), [
    (None, False, True, 2),  # the 7 samples at once, plus the first alone to check the graph does not mix them
    (None, True, True, 2 + 7),  # that check fails: then one sample at a time
    (1, False, False, 7),  # a graph with a fixed batch: one sample at a time
])
def test_the_tf1_session_runs_parity_chunks_at_once_unless_the_graph_mixes_samples(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int | None, mixes_samples: bool, any_batch: bool,
        runs: int) -> None:
    import tensorflow as tf

    from edgeconv.converters.graphdef_loader import graph_from_graphdef

    pb = _dense_graph(tmp_path / "dense.pb", batch, mixes_samples=mixes_samples)
    loaded = graph_from_graphdef(pb, batch_size=1, input_shapes={})
    assert loaded.any_batch is any_batch
    assert [tuple(i.shape) for i in loaded.graph.inputs] == [(1, 6)]  # what is converted stays pinned
    x = np.random.default_rng(4).normal(size=(7, 6)).astype(np.float32)
    one_by_one = np.concatenate([loaded.reference({"x": x[i:i + 1]})["y"] for i in range(7)])
    calls = []
    original = tf.compat.v1.Session.run
    monkeypatch.setattr(tf.compat.v1.Session, "run", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    at_once = loaded.reference({"x": x})["y"]
    assert len(calls) == runs
    np.testing.assert_allclose(at_once, one_by_one, rtol=1e-6, atol=1e-6)
    if mixes_samples:
        assert np.array_equal(at_once, one_by_one)


@pytest.mark.parametrize("edge", ["control", "data"])
def test_a_graph_that_writes_files_is_refused_before_it_ever_runs(tmp_path: Path, edge: str) -> None:
    """A frozen graph whose output needs a WriteFile (by a control edge, or its data): refused from the
    GraphDef, so the file it would write never appears."""
    import tensorflow as tf

    target = tmp_path / "written.txt"
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        if edge == "control":
            write = tf.io.write_file(str(target), tf.strings.as_string(tf.reduce_sum(x)), name="leak")
            with tf.control_dependencies([write]):
                tf.identity(x * 2.0, name="y")
        else:
            tf.add(x, tf.cast(tf.size(tf.io.read_file(str(target), name="peek")), tf.float32), name="y")
    pb = tmp_path / "leaky.pb"
    pb.write_bytes(graph.as_graph_def().SerializeToString())
    (tmp_path / "a").mkdir()
    with pytest.raises(ModelError) as err:
        edgeconv.build(project(tmp_path / "a", pb, cal={"x": np.ones((20, 4), np.float32)}))
    listed = ("WriteFile 'leak' (an op with effects outside the graph: files, network, processes or state)"
              if edge == "control" else "ReadFile 'peek' (an op that reads files or runs Python)")
    assert str(err.value) == (f"a/leaky.pb: the graph holds ops edgeconv does not run: {listed}. edgeconv runs "
                              "the graph to "
                              "trace and calibrate it, so it refuses them before anything runs; set "
                              "model.trust_code: true only if you trust the model, or export it again without it "
                              "(inference needs none of it)")
    assert not target.exists()


# -- SavedModels -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_signatures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TF2 SavedModel: serving_default takes feat (5) and meta (2) and returns logits and embedding;
    embed takes feat only."""
    import tensorflow as tf

    rng = np.random.default_rng(2)

    class Model(tf.Module):
        def __init__(self) -> None:
            self.w = tf.Variable(rng.normal(size=(5, 4)).astype(np.float32))
            self.v = tf.Variable(rng.normal(size=(2, 4)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32, name="feat"),
                                      tf.TensorSpec([None, 2], tf.float32, name="meta")])
        def serve(self, feat: Any, meta: Any) -> Any:
            h = tf.nn.relu(tf.matmul(feat, self.w))
            return {"logits": h + tf.matmul(meta, self.v), "embedding": h}

        @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32, name="feat")])
        def embed(self, feat: Any) -> Any:
            return {"embedding": tf.nn.relu(tf.matmul(feat, self.w))}

    model = Model()
    path = tmp_path_factory.mktemp("sm") / "two_signatures"
    tf.saved_model.save(model, str(path), signatures={"serving_default": model.serve, "embed": model.embed})
    return path


def test_savedmodel_default_signature_keeps_input_and_output_names(two_signatures: Path, tmp_path: Path) -> None:
    import tensorflow as tf

    rng = np.random.default_rng(4)
    cal = {"feat": rng.normal(size=(24, 5)).astype(np.float32), "meta": rng.normal(size=(24, 2)).astype(np.float32)}
    result = edgeconv.build(project(tmp_path, two_signatures, cal=cal))
    report = result.report
    assert report["model"]["format"] == "savedmodel"
    assert [i["name"] for i in report["model"]["inputs"]] == ["feat", "meta"]
    assert sorted(o["name"] for o in report["model"]["outputs"]) == ["embedding", "logits"]
    assert sorted(i["signature_name"] for i in report["tflite"]["inputs"]) == ["feat", "meta"]
    assert sorted(o["signature_name"] for o in report["tflite"]["outputs"]) == ["embedding", "logits"]
    assert report["equivalence"]["max_abs_diff"] <= 1e-5
    assert_clean_tflite(result.tflite_path)
    fn = tf.saved_model.load(str(two_signatures)).signatures["serving_default"]
    feeds = {"feat": cal["feat"][:1], "meta": cal["meta"][:1]}
    want = {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in feeds.items()}).items()}
    got = models.run_tflite(result.tflite_path, feeds)
    for name in ("logits", "embedding"):
        np.testing.assert_allclose(got[name], want[name], atol=0.05 * float(np.abs(want[name]).max()) + 0.02)


def test_savedmodel_picks_the_named_signature(two_signatures: Path, tmp_path: Path) -> None:
    cal = {"feat": np.random.default_rng(5).normal(size=(24, 5)).astype(np.float32)}
    result = edgeconv.build(project(tmp_path, two_signatures, "  signature: embed\n", cal=cal))
    assert [i["name"] for i in result.report["model"]["inputs"]] == ["feat"]
    assert [o["name"] for o in result.report["model"]["outputs"]] == ["embedding"]
    assert "SavedModel signature 'embed'" in result.report["model"]["framework"]


def test_savedmodel_unknown_signature_lists_the_available_ones(two_signatures: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = project(tmp_path, two_signatures, "  signature: embedding\n", cal={"feat": np.ones((20, 5))})
    assert main(["build", str(pipeline), "-q"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "edgeconv: error: model.signature: 'embedding' is not a signature of two_signatures (available: embed, "
        "serving_default); did you mean 'embed'?"]
    assert not (tmp_path / "build").exists()


def test_tf1_savedmodel_goes_through_the_tf1_loader_and_needs_the_binding(tf1: dict[str, Path],
                                                                           tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(ModelError, match=r"^placeholder 'is_training' \(bool\) is not bound and switches"):
        edgeconv.build(project(tmp_path / "a", tf1["savedmodel"]))
    (tmp_path / "b").mkdir()
    result = edgeconv.build(project(tmp_path / "b", tf1["savedmodel"], "  bind: {is_training: false}\n"))
    assert result.passed
    assert result.report["model"]["notes"] == [
        "TF1 SavedModel (no object graph): loaded with the TF1 session loader",
        "placeholder 'is_training' bound to false (model.bind)"]
    assert_clean_tflite(result.tflite_path)
    assert result.report["equivalence"]["max_abs_diff"] <= 1e-5


def test_keras_export_savedmodel_is_attributed_to_its_layers(tmp_path: Path) -> None:
    import keras

    keras.utils.set_random_seed(3)
    inp = keras.Input((7, 6, 2), name="frame")
    x = keras.layers.Conv2D(4, 3, name="conv_a")(inp)
    x = keras.layers.Dropout(0.5, name="drop_a")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool_a")(x)
    keras.Model(inp, keras.layers.Dense(3, name="head_a")(x)).export(str(tmp_path / "exported"), verbose=False)
    (tmp_path / "p").mkdir()
    cal = {"frame": np.random.default_rng(1).normal(size=(20, 7, 6, 2)).astype(np.float32)}
    result = edgeconv.build(project(tmp_path / "p", tmp_path / "exported", cal=cal))
    assert result.passed
    layers = {layer for op in result.report["targets"][0]["ops"] for layer in op["source_layers"]}
    # A Keras export keeps no layer list; its name scopes are the layers (Keras numbers them per trace).
    assert "conv_a_1" in layers
    assert result.report["equivalence"]["max_abs_diff"] <= 1e-5


# -- Keras .h5 and subclassed models ------------------------------------------------------------

def test_real_keras2_h5_model_builds(tmp_path: Path) -> None:
    """fer's emotion model: saved by Keras 2.0.5, mini-Xception with 14 BatchNorm and SeparableConv2D."""
    import keras
    from PIL import Image
    from skimage.data import lfw_subset

    # Real faces (scikit-image's LFW subset, 25x25 in [0, 1]) at the model's 64x64 in [-1, 1].
    faces = np.stack([np.asarray(Image.fromarray((f * 255).astype(np.uint8)).resize((64, 64)), np.float32)
                      for f in lfw_subset()[:100:4]])[..., None] / 127.5 - 1.0
    result = edgeconv.build(project(tmp_path, FER, cal={"input_1": faces}, targets="generic-int8, edgetpu"))
    report = result.report
    assert result.passed, report["gate"]
    assert report["model"]["format"] == "h5"
    assert report["model"]["notes"] == [
        f"legacy Keras HDF5 model (saved by Keras 2.0.5), loaded by Keras {keras.__version__} with compile=False"]
    assert report["model"]["inputs"] == [{"name": "input_1", "shape": [1, 64, 64, 1], "dtype": "float32"}]
    assert report["equivalence"]["max_abs_diff"] <= 1e-5
    assert_clean_tflite(result.tflite_path)
    want = keras.models.load_model(FER, compile=False)(faces[:4], training=False).numpy()
    got = np.concatenate([next(iter(models.run_tflite(result.tflite_path, {"input_1": f[None]}).values()))
                          for f in faces[:4]])
    np.testing.assert_allclose(got, want, atol=0.05)


def test_weights_only_h5_is_refused(tmp_path: Path) -> None:
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.save_weights(tmp_path / "only.weights.h5")
    shutil.move(tmp_path / "only.weights.h5", tmp_path / "w.h5")
    (tmp_path / "p").mkdir()
    with pytest.raises(ModelError) as err:
        edgeconv.build(project(tmp_path / "p", tmp_path / "w.h5", cal={"x": np.ones((20, 3))}))
    assert str(err.value) == ("p/w.h5: holds weights only (no model_config); save the whole model (model.save), not "
                              "model.save_weights")


def test_a_dict_output_named_by_an_op_and_an_integer_class_output_build(tmp_path: Path) -> None:
    """Keras names a dict output that an op computes by the op ("softmax_1"), not by its key ("probs"): the
    dict's keys name the outputs (it was a KeyError raised while tracing, shown as "in user code:"). An
    argmax's int32 class stays int32 in the .tflite, whatever output_type says (it was refused with a fix
    naming output_type: int32, which the pipeline does not allow)."""
    import keras

    layers = models.write_custom_layers(tmp_path, "dict_out")
    keras.utils.set_random_seed(4)
    inp = keras.Input((7,), name="feat")
    logits = keras.layers.Dense(5, name="logits")(inp)
    model = keras.Model(inp, {"probs": keras.ops.softmax(logits), "cls": layers.ClassOf(name="cls")(logits)})
    assert sorted(model.output_names) != ["cls", "probs"]
    model.save(tmp_path / "m.keras")
    x = np.random.default_rng(4).normal(size=(16, 7)).astype(np.float32)  # the 16 the pipeline calibrates on
    result = edgeconv.build(project(tmp_path, tmp_path / "m.keras", "  custom_modules: [dict_out]\n  trust_code: "
                                    "true\n", cal={"feat": x}, targets="arm-neon"))
    outputs = {o["signature_name"]: o["dtype"] for o in result.report["tflite"]["outputs"]}
    assert outputs == {"probs": "int8", "cls": "int32"}
    got = models.run_tflite(result.tflite_path, {"feat": x[:1]})
    want = model(x[:1], training=False)
    assert int(got["cls"][0]) == int(want["cls"][0]) == int(np.argmax(got["probs"][0]))
    # The class is compared value by value (an index output), not by an SQNR of class numbers.
    parity = result.report["parity"]
    assert parity["kinds"] == {"probs": "classification", "cls": "index"}
    built = [models.run_tflite(result.tflite_path, {"feat": x[i:i + 1]})["cls"][0] for i in range(16)]
    same = np.mean(np.array(built) == np.asarray(model(x[:16], training=False)["cls"]))
    assert parity["outputs"]["cls"]["built"]["top1_agreement"] == pytest.approx(same)
    assert parity["outputs"]["cls"]["built"]["sqnr_db"] is None


def test_raw_uint8_pixels_stay_uint8_with_the_default_input_type(tmp_path: Path) -> None:
    """A model that takes raw uint8 pixels and scales them itself: no quantization reaches an integer input,
    so the .tflite takes uint8 whatever input_type says (auto wanted int8 and the build was refused until
    input_type said uint8). It builds, gated on its real photos like any model."""
    import keras

    keras.utils.set_random_seed(7)
    inp = keras.Input((12, 10, 3), dtype="uint8", name="pixels")
    x = keras.layers.Rescaling(1 / 255.0, name="scale")(keras.ops.cast(inp, "float32"))
    x = keras.layers.GlobalAveragePooling2D(name="pool")(keras.layers.Conv2D(4, 3, activation="relu", name="conv")(x))
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax", name="probs")(x))
    model.save(tmp_path / "u8.keras")
    pixels = np.round(models.photos(16, 12, 10, seed=7) * 255).astype(np.uint8)
    result = edgeconv.build(project(tmp_path, tmp_path / "u8.keras", cal={"pixels": pixels}, targets="arm-neon"))
    assert [(i["signature_name"], i["dtype"]) for i in result.report["tflite"]["inputs"]] == [("pixels", "uint8")]
    assert result.passed, result.report["gate"]["reasons"]
    got = models.run_tflite(result.tflite_path, {"pixels": pixels[:1]})["probs"]
    np.testing.assert_allclose(got, model(pixels[:1], training=False).numpy(), atol=2 / 256)


def test_a_lambda_layer_s_stored_code_runs_only_with_trust_code(tmp_path: Path) -> None:
    """A Lambda's Python function is bytecode in the .keras file: a stranger's model could run anything. Without
    model.trust_code the build refuses it before any of it exists (the function would write a file when
    called: none is written), naming the fix; with it, the model builds and the .tflite computes the Lambda."""
    import keras

    marker = tmp_path / "ran.txt"
    inp = keras.Input((7,), name="feat")
    x = keras.layers.Dense(5, name="d")(inp)
    # The marker's path a constant of the function's bytecode (a closure's variables would be serialized).
    writes = eval(f"lambda t: t + float(__import__('pathlib').Path({str(marker)!r}).write_text('x'))")
    hostile = keras.layers.Lambda(writes, output_shape=(5,), name="hostile")
    keras.Model(inp, hostile(x)).save(tmp_path / "hostile.keras")
    marker.unlink(missing_ok=True)  # whether Keras called it while making the model or not
    x_cal = np.random.default_rng(6).normal(size=(16, 7)).astype(np.float32)
    (tmp_path / "refused").mkdir()
    (tmp_path / "trusted").mkdir()
    with pytest.raises(ModelError) as err:
        edgeconv.build(project(tmp_path / "refused", tmp_path / "hostile.keras", cal={"feat": x_cal}))
    assert str(err.value) == (
        "refused/hostile.keras: the model has a Lambda layer whose Python function is stored in the file; loading "
        "it runs that code. Fix: set model.trust_code: true if you trust the model file, or replace the Lambda with "
        "a registered layer (model.custom_modules)")
    assert not marker.exists() and not (tmp_path / "refused" / "build").exists()

    keras.utils.set_random_seed(6)
    inp = keras.Input((7,), name="feat")
    model = keras.Model(inp, keras.layers.Lambda(lambda t: t * 2.0 + 1.0, name="affine")(
        keras.layers.Dense(5, name="d")(inp)))
    model.save(tmp_path / "lam.keras")
    result = edgeconv.build(project(tmp_path / "trusted", tmp_path / "lam.keras", "  trust_code: true\n",
                                    cal={"feat": x_cal}))
    want = model(x_cal[:1], training=False).numpy()
    got = next(iter(models.run_tflite(result.tflite_path, {"feat": x_cal[:1]}).values()))
    np.testing.assert_allclose(got, want, atol=0.05 * float(np.abs(want).max()))


def test_a_module_the_model_file_names_is_not_imported_and_the_fix_names_it(tmp_path: Path) -> None:
    """A .keras file's config names the module of each function it uses: a pull request can name its own
    module (here `actmod`, importable from the working directory, writing a file as it is imported) for a
    layer's activation. Without model.trust_code it is not imported; the error is the innermost one (Keras
    wraps it in the layer's and the model's), naming the function and the entry to write; with that entry and
    trust_code the model builds."""
    import json as json_
    import sys
    import zipfile

    import keras

    marker = tmp_path / "imported.txt"
    (tmp_path / "actmod.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n"
                                        "def act(x):\n    return x * 0.5\n")
    inp = keras.Input((7,), name="feat")
    keras.Model(inp, keras.layers.Dense(5, activation="relu", name="d")(inp)).save(tmp_path / "plain.keras")
    with zipfile.ZipFile(tmp_path / "plain.keras") as z:
        files = {n: z.read(n) for n in z.namelist()}
    config = json_.loads(files["config.json"])
    (dense,) = [layer for layer in config["config"]["layers"] if layer["class_name"] == "Dense"]
    dense["config"]["activation"] = {"module": "actmod", "class_name": "function", "config": "act",
                                     "registered_name": "act"}
    files["config.json"] = json_.dumps(config).encode()
    with zipfile.ZipFile(tmp_path / "m.keras", "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    x_cal = np.random.default_rng(7).normal(size=(16, 7)).astype(np.float32)
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ModelError) as err:
            edgeconv.build(project(tmp_path, tmp_path / "m.keras", cal={"feat": x_cal}))
        assert str(err.value) == (
            "m.keras: the model uses the custom function 'act', which is not registered; name it in the pipeline "
            "(model.custom_objects: {act: 'actmod:act'}, with model.trust_code: true), or list the module that "
            "registers it with @keras.saving.register_keras_serializable in model.custom_modules")
        assert "actmod" not in sys.modules and not marker.exists() and not (tmp_path / "build").exists()
        result = edgeconv.build(project(tmp_path, tmp_path / "m.keras",
                                        "  custom_objects: {act: 'actmod:act'}\n  trust_code: true\n",
                                        cal={"feat": x_cal}))
        assert marker.exists() and result.tflite_path.exists()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("actmod", None)


def test_a_model_output_name_with_a_terminal_escape_is_refused_before_any_data_is_read(tmp_path: Path) -> None:
    """A model's output names are the model's (a pull request's) to choose: a dict key with a newline and a
    terminal escape reached the console, report.md's tables (a broken row) and JUnit (invalid XML). Exit 2
    naming it, nothing written."""
    import keras

    inp = keras.Input((7,), name="feat")
    x = keras.layers.Dense(5, name="d")(inp)
    keras.Model(inp, {"evil\x1b[31m\nline": keras.ops.softmax(x), "raw": x}).save(tmp_path / "m.keras")
    pipeline = project(tmp_path, tmp_path / "m.keras", cal={"feat": np.ones((16, 7), np.float32)})
    assert main(["build", str(pipeline), "-q"]) == 2
    with pytest.raises(ModelError) as err:
        edgeconv.build(pipeline)
    assert str(err.value) == ("m.keras: model output name 'evil\\x1b[31m\\nline' holds a character that is not "
                              "printable (a newline, a terminal escape). Fix: rename the output")
    assert not (tmp_path / "build").exists()
    # A layer's name (Keras takes any) never gets that far: TensorFlow refuses it as a scope name while tracing,
    # and the line says so without the bell.
    inp = keras.Input((7,), name="feat")
    keras.Model(inp, keras.layers.Dense(5, name="d\x07ing")(inp)).save(tmp_path / "layer.keras")
    with pytest.raises(ModelError) as err:
        edgeconv.build(project(tmp_path, tmp_path / "layer.keras", cal={"feat": np.ones((16, 7), np.float32)}))
    assert str(err.value).startswith("layer.keras: tracing the model with training=False failed: ValueError in "
                                     "Functional.call(): 'd ing' is not a valid scope name.")
    assert not (tmp_path / "build").exists()


def test_an_error_raised_in_a_layer_s_call_is_named_with_its_message(tmp_path: Path) -> None:
    """TensorFlow wraps it ("in user code:", the stack), Keras too (the layer, the message, the arguments):
    the one line names the error, the layer and the message, without the terminal escapes."""
    import keras

    layers = models.write_custom_layers(tmp_path, "pairs_only")
    inp = keras.Input((7,), name="feat")
    keras.Model(inp, layers.NeedsPairs(name="pairs")(keras.layers.Dense(5, name="d")(inp))).save(tmp_path / "m.keras")
    with pytest.raises(ModelError) as err:
        edgeconv.build(project(tmp_path, tmp_path / "m.keras", "  custom_modules: [pairs_only]\n  trust_code: true\n",
                               cal={"feat": np.ones((24, 7), np.float32)}))
    assert str(err.value) == ("m.keras: tracing the model with training=False failed: ValueError in NeedsPairs.call(): "
                              "this layer needs a batch of 2")


def test_subclassed_keras3_model_is_traced_through_its_call_argument(tmp_path: Path) -> None:
    import keras

    layers = models.write_custom_layers(tmp_path, "tiny_net")
    keras.utils.set_random_seed(2)
    net = layers.TinyNet(name="tiny")
    x = np.random.default_rng(3).normal(size=(24, 7, 6, 2)).astype(np.float32)
    net(x[:2])
    net.save(tmp_path / "net.keras")
    pipeline = project(tmp_path, tmp_path / "net.keras", "  custom_modules: [tiny_net]\n  trust_code: true\n",
                       cal={"image": x})
    result = edgeconv.build(pipeline)
    report = result.report
    assert result.passed
    assert report["model"]["inputs"] == [{"name": "image", "shape": [1, 7, 6, 2], "dtype": "float32"}]
    assert report["model"]["notes"] == [
        "subclassed model TinyNet: input 'image' (the call() argument) traced with shape [1, 7, 6, 2] from its "
        "build config"]
    assert report["equivalence"]["max_abs_diff"] <= 1e-5
    assert_clean_tflite(result.tflite_path)
    want = net(x[:1], training=False).numpy()
    got = next(iter(models.run_tflite(result.tflite_path, {"image": x[:1]}).values()))
    np.testing.assert_allclose(got, want, atol=0.05 * float(np.abs(want).max()))


def test_batch_norm_forced_into_training_is_refused(tmp_path: Path) -> None:
    layers = models.write_custom_layers(tmp_path, "forced_bn")
    models.dense_model(tmp_path / "bn.keras", layers.ForcedBN(name="always_training"))
    models.calibration(tmp_path / "cal_src.npz")
    pipeline = project(tmp_path, tmp_path / "bn.keras", "  custom_modules: [forced_bn]\n  trust_code: true\n",
                       cal=dict(np.load(tmp_path / "cal_src.npz")))
    with pytest.raises(ModelError) as err:
        edgeconv.build(pipeline)
    assert str(err.value) == (
        "layer 'always_training' computes batch-norm moments over the batch axis at inference time (Mean "
        "'tiny_1/always_training_1/moments/mean' over axis 0): batch norm in training mode. Fix: call the layer "
        "with training=False (do not pass training=True inside call())")


# -- an existing .tflite -----------------------------------------------------------------------

def test_existing_tflite_is_checked_as_it_is(tmp_path: Path) -> None:
    source = REPO / "tests" / "data" / "conv2d-relu.int8.tflite"
    shutil.copy(source, tmp_path / "given.tflite")
    (tmp_path / "pipeline.yaml").write_text("version: 1\nmodel: {path: given.tflite}\n"
                                            "targets: [generic-int8, arm-neon]\n")
    result = edgeconv.build(tmp_path / "pipeline.yaml")
    report = result.report
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert result.tflite_path.read_bytes() == source.read_bytes()
    assert report["passes"] == [] and report["equivalence"] is None and report["quantization"] is None
    assert report["model"]["format"] == "tflite"
    assert [t["verdict"] for t in report["targets"]] == ["pass", "pass"]
    assert "an existing .tflite, checked as it is" in (result.output_dir / "report.md").read_text()


def test_settings_that_do_not_apply_to_a_tflite_are_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(REPO / "tests" / "data" / "conv2d-relu.int8.tflite", tmp_path / "given.tflite")
    np.savez(tmp_path / "cal.npz", x=np.ones((4, 2)))
    (tmp_path / "pipeline.yaml").write_text("version: 1\nmodel: {path: given.tflite}\n"
                                            "calibration: {path: cal.npz}\npasses: [strip-training]\n")
    assert main(["validate", str(tmp_path / "pipeline.yaml")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "edgeconv: error: pipeline.yaml:3: calibration: does not apply to an existing .tflite model (it is checked "
        "as it is: no passes, no conversion); remove it",
        "edgeconv: error: pipeline.yaml:4: passes: does not apply to an existing .tflite model (it is checked as it "
        "is: no passes, no conversion); remove it"]


# -- shapes ----------------------------------------------------------------------------------------

def test_dynamic_dims_are_pinned_so_no_shape_chains_reach_the_tflite(tmp_path: Path) -> None:
    """MobileNetV3Small with open height and width: the converter alone leaves SHAPE/STRIDED_SLICE/PACK
    chains for dynamic dims (scripts/measure_converter_cleanup.py); pinned by model.input_shapes, none."""
    import keras

    keras.utils.set_random_seed(0)
    net = keras.applications.MobileNetV3Small(weights=None, input_shape=(None, None, 3), classes=5,
                                              include_preprocessing=False)
    net.save(tmp_path / "mnv3.keras")
    name = net.inputs[0]._keras_history.operation.name
    x = np.random.default_rng(0).uniform(-1, 1, size=(16, 64, 48, 3)).astype(np.float32)
    pipeline = project(tmp_path, tmp_path / "mnv3.keras", f"  input_shapes: {{{name}: [1, 64, 48, 3]}}\n",
                       cal={name: x})
    result = edgeconv.build(pipeline)
    ops = {op.type for op in read_tflite(result.tflite_path).ops}
    assert not ops & {"SHAPE", "STRIDED_SLICE", "PACK"}, ops
    assert result.report["model"]["inputs"][0]["shape"] == [1, 64, 48, 3]
    assert result.report["equivalence"]["max_abs_diff"] <= 1e-5


def test_swish_models_export_without_passes(tmp_path: Path) -> None:
    """swish carries a custom gradient; saving the traced graph for the converter must not try to save
    gradients ("Found invalid capture ... when saving custom gradients", EfficientNet with passes: [])."""
    import keras

    models.dense_model(tmp_path / "swish.keras", keras.layers.Activation("swish", name="act"))
    cal = {"feat": np.random.default_rng(0).normal(size=(20, 6)).astype(np.float32)}
    result = edgeconv.build(project(tmp_path, tmp_path / "swish.keras", cal=cal, extra="passes: []\n"))
    assert result.report["passes"] == []
    assert result.report["equivalence"]["max_abs_diff"] <= 1e-5
    assert "LOGISTIC" in {op.type for op in read_tflite(result.tflite_path).ops}  # swish = x * sigmoid(x)


def test_keras2_savedmodel_builds_with_its_layers_named(tmp_path: Path) -> None:
    """A Keras 2 (tf-keras) SavedModel with optimizer slots, made by scripts/make_keras2_savedmodel.py."""
    cal = {"feat": np.random.default_rng(6).normal(size=(24, 6)).astype(np.float32)}
    result = edgeconv.build(project(tmp_path, REPO / "tests" / "data" / "keras2_savedmodel", cal=cal))
    report = result.report
    assert result.passed
    assert report["model"]["outputs"] == [{"name": "d2", "shape": [1, 3], "dtype": "float32"}]
    assert report["equivalence"]["max_abs_diff"] <= 1e-5
    assert set(report["passes"][0]["removed_by_layer"]) == {"(no layer)", "bn", "d1", "d2", "drop"}
    layers = {layer for op in report["targets"][0]["ops"] for layer in op["source_layers"]}
    assert {"d1", "d2"} <= layers
    assert_clean_tflite(result.tflite_path)


def test_savedmodel_tf2_cannot_revive_falls_back_to_the_tf1_loader(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """TF 2.16+ fails on TF 2.4-era Keras SavedModels with this error (corpus.md); the TF1 session loader
    reads the same folder through its signature. The failure is simulated, the fallback load is real."""
    import tensorflow as tf

    def cannot_revive(*args: Any, **kwargs: Any) -> Any:
        raise AttributeError("'_UserObject' object has no attribute 'add_slot'")

    monkeypatch.setattr(tf.saved_model, "load", cannot_revive)
    cal = {"feat": np.random.default_rng(6).normal(size=(24, 6)).astype(np.float32)}
    result = edgeconv.build(project(tmp_path, REPO / "tests" / "data" / "keras2_savedmodel", cal=cal))
    report = result.report
    assert report["model"]["notes"] == [
        "tf.saved_model.load failed ('_UserObject' object has no attribute 'add_slot'); loaded with the TF1 "
        "session loader instead"]
    assert result.passed and report["equivalence"]["max_abs_diff"] <= 1e-5
    # The signature's function call is inlined, so the passes see (and attribute) every op.
    assert {"d1", "bn", "d2"} <= set(report["passes"][0]["removed_by_layer"])
    assert_clean_tflite(result.tflite_path)


def test_unreadable_savedmodel_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "saved_model.pb").write_bytes(b"\x00garbage\xff" * 8)
    with pytest.raises(ModelError) as err:
        edgeconv.build(project(tmp_path, tmp_path / "broken"))
    assert str(err.value).startswith("broken: TensorFlow cannot load the SavedModel: ")
    assert "; the TF1 loader failed too: broken: the TF1 loader cannot load it: " in str(err.value)
