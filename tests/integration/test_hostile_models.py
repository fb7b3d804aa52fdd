"""A model from a stranger's pull request runs nothing of its own before edgeconv has checked it: each
model here does IO when any of it runs (as the loader loads it, or as the graph runs), and each build
exits 2 naming the op, with no probe file or folder anywhere. ``model.trust_code: true`` is the way in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv.cli import main

from ..conftest import tree

TRUST = ("set model.trust_code: true only if you trust the model, or export it again without it (inference needs "
         "none of it)")


def _graph(build: Callable[[Any, Any], Any]) -> bytes:
    """A frozen TF1 graph: x [None, 4] -> whatever ``build(tf, x)`` returns, named y."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        tf.identity(build(tf, x), name="y")
    return bytes(graph.as_graph_def().SerializeToString())


def print_to_file(tf: Any, x: Any, probe: Path) -> Any:
    printed = tf.raw_ops.PrintV2(input=tf.strings.as_string(tf.reduce_sum(x)), output_stream=f"file://{probe}")
    with tf.control_dependencies([printed]):
        return x * 2.0


def debug_identity(tf: Any, x: Any, probe: Path) -> Any:
    return tf.raw_ops.DebugIdentity(input=x, debug_urls=[f"file://{probe}"]) * 2.0


def dataset_writer(tf: Any, x: Any, probe: Path) -> Any:
    dataset = tf.data.Dataset.from_tensor_slices(tf.strings.as_string(x[0]))
    write = tf.raw_ops.DatasetToTFRecord(input_dataset=dataset._variant_tensor, filename=str(probe),
                                         compression_type="")
    with tf.control_dependencies([write]):
        return x * 2.0


def table_from_file(tf: Any, x: Any, probe: Path) -> Any:
    table = tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64)
    init = tf.raw_ops.InitializeTableFromTextFileV2(table_handle=table, filename=str(probe), key_index=-2,
                                                    value_index=-1)
    with tf.control_dependencies([init]):
        found = tf.raw_ops.LookupTableFindV2(table_handle=table, keys=tf.constant("a"),
                                             default_value=tf.constant(-1, tf.int64))
    return x + tf.cast(found, tf.float32)


def write_file(tf: Any, x: Any, probe: Path) -> Any:
    write = tf.io.write_file(str(probe), tf.strings.as_string(tf.reduce_sum(x)))
    with tf.control_dependencies([write]):
        return x * 2.0


GRAPHS = {
    "print_to_file": (print_to_file, "PrintV2 'PrintV2' writes to 'file://{probe}'"),
    "debug_identity": (debug_identity, "DebugIdentity 'DebugIdentity' sends to 'file://{probe}'"),
    "dataset_writer": (dataset_writer, "DatasetToTFRecord 'DatasetToTFRecord' (an op with effects outside the "
                                       "graph: files, network, processes or state); TensorSliceDataset "
                                       "'TensorSliceDataset' (an op with effects outside the graph: files, network, "
                                       "processes or state)"),
    "table_from_file": (table_from_file, "InitializeTableFromTextFileV2 'InitializeTableFromTextFileV2' (an op "
                                         "with effects outside the graph: files, network, processes or state)"),
}


def _project(root: Path, model: str, model_yaml: str = "") -> Path:
    np.savez(root / "cal.npz", x=np.random.default_rng(0).random((20, 4), dtype=np.float32))
    pipeline = root / "pipeline.yaml"
    pipeline.write_text(f"version: 1\nmodel:\n  path: {model}\n{model_yaml}"
                        "calibration: {path: cal.npz, samples: 16}\ntargets: [generic-int8]\noutput: {dir: out}\n")
    return pipeline


def _build(pipeline: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.chdir(pipeline.parent)
    monkeypatch.setenv("EDGECONV_NO_CACHE", "1")
    code = main(["build", pipeline.name])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_a_frozen_graph_with_io_is_refused_before_it_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    build, problem = GRAPHS[name]
    probe = tmp_path / "probe"
    project = tmp_path / "project"
    project.mkdir()
    (project / "m.pb").write_bytes(_graph(lambda tf, x: build(tf, x, probe)))
    if name == "table_from_file":
        probe.write_text("a\t1\n")  # what it would read: present, so only the check can stop it
    pipeline = _project(project, "m.pb")
    before = tree(tmp_path)
    code, err = _build(pipeline, capsys, monkeypatch)
    assert code == 2
    assert err.splitlines()[-1] == (f"edgeconv: error: m.pb: the graph holds ops edgeconv does not run: "
                           f"{problem.format(probe=probe)}. edgeconv runs the graph to trace and calibrate it, so it "
                           f"refuses them before anything runs; {TRUST}")
    assert tree(tmp_path) == before and not (project / "out").exists()


def _tf1_savedmodel_with_main_op(path: Path, probe: Path) -> None:
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        y = tf.identity(x * 2.0, name="y")
        main_op = tf.io.write_file(str(probe), tf.constant("loaded"), name="leak")
        builder = tf.compat.v1.saved_model.Builder(str(path))
        signature = tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature},
                                             main_op=main_op)
        builder.save()


def _tf2_savedmodel_with_resource(path: Path, probe: Path) -> None:
    import tensorflow as tf

    class Leaky(tf.saved_model.experimental.TrackableResource):  # type: ignore[misc]
        def _create_resource(self) -> Any:
            return tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64)

        def _initialize(self) -> Any:
            return tf.io.write_file(str(probe), tf.constant("loaded"))

    module = tf.Module()
    module.table = Leaky()
    module.f = tf.function(lambda x: {"y": x * 2.0}, input_signature=[tf.TensorSpec([None, 4], tf.float32, "x")])
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.f})


@pytest.mark.parametrize(("make", "problem"), [
    (_tf1_savedmodel_with_main_op, "WriteFile 'leak' in its init op"),
    (_tf2_savedmodel_with_resource, "a restored resource (object 1) whose initializer runs on load; "
                                    "StatefulPartitionedCall 'StatefulPartitionedCall' in its init op"),
])
def test_a_savedmodel_that_runs_code_as_it_loads_is_refused_before_the_loader(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        make: Callable[[Path, Path], None], problem: str) -> None:
    probe = tmp_path / "probe"
    project = tmp_path / "project"
    project.mkdir()
    make(project / "sm", probe)
    probe.unlink(missing_ok=True)  # saving may run the initializer once: only what the build runs counts
    pipeline = _project(project, "sm")
    before = tree(tmp_path)
    code, err = _build(pipeline, capsys, monkeypatch)
    assert code == 2
    assert err.splitlines()[-1] == (f"edgeconv: error: sm: the SavedModel runs code of its own as it is loaded "
                                    f"({problem}); TensorFlow's loader runs it before edgeconv could check it: {TRUST}")
    assert tree(tmp_path) == before and not probe.exists()


def test_a_savedmodel_whose_restore_op_does_io_is_refused_before_the_loader(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The TF1 loader runs saver_def.restore_op_name to restore the variables: pointed at a WriteFile."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    probe = tmp_path / "probe"
    project = tmp_path / "project"
    project.mkdir()
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        weight = tf.compat.v1.get_variable("w", initializer=tf.ones([4]))
        y = tf.identity(x * weight, name="y")
        tf.io.write_file(str(probe), tf.constant("restored"), name="leak")
        session.run(tf.compat.v1.global_variables_initializer())
        builder = tf.compat.v1.saved_model.Builder(str(project / "sm"))
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
            "serving_default": tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})})
        builder.save()
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((project / "sm" / "saved_model.pb").read_bytes())
    proto.meta_graphs[0].saver_def.restore_op_name = "leak"
    (project / "sm" / "saved_model.pb").write_bytes(proto.SerializeToString())
    pipeline = _project(project, "sm")
    before = tree(tmp_path)
    code, err = _build(pipeline, capsys, monkeypatch)
    assert code == 2
    assert err.splitlines()[-1] == ("edgeconv: error: sm: the SavedModel restores its variables with ops edgeconv "
                                    "does not run: WriteFile 'leak' (an op with effects outside the graph: files, "
                                    "network, processes or state). edgeconv runs the graph to trace and calibrate "
                                    f"it, so it refuses them before anything runs; {TRUST}")
    assert tree(tmp_path) == before and not probe.exists()


def test_trust_code_lets_the_model_run_what_it_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The same TF1 SavedModel, trusted: the loader runs its main op (the probe is written), the build goes on."""
    from edgeconv.converters.savedmodel_loader import graph_from_savedmodel

    probe = tmp_path / "probe"
    _tf1_savedmodel_with_main_op(tmp_path / "sm", probe)
    probe.unlink(missing_ok=True)
    loaded = graph_from_savedmodel(tmp_path / "sm", signature="serving_default", batch_size=1, input_shapes={},
                                   trust_code=True)
    assert loaded.graph.inputs[0].name == "x" and probe.read_text() == "loaded"


@pytest.mark.parametrize("key", ["trust_code: true"])
def test_trust_code_is_a_setting_of_savedmodels_and_graphs(tmp_path: Path, key: str) -> None:
    from edgeconv.config import load_pipeline

    (tmp_path / "m.pb").write_bytes(_graph(lambda tf, x: x * 2.0))
    assert load_pipeline(_project(tmp_path, "m.pb", f"  {key}\n")).model.trust_code is True
