"""What a build must not do twice (issue 16): calibrate, import TensorFlow in the converter for each
conversion, or run the source model eagerly one sample at a time. Real conversions."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import edgeconv

from . import models
from .test_verify import ANY_MODE_TARGET

pytestmark = pytest.mark.tf

CALIBRATION = 48
EVALUATION = 40


def _project(tmp_path: Path, culprits: int, evaluation: int = EVALUATION) -> Path:
    import keras

    models.dense_model(tmp_path / "tiny.keras", keras.layers.ReLU(name="act"), features=7, hidden=9, classes=5)
    models.calibration(tmp_path / "cal.npz", samples=CALIBRATION, features=7)
    x = np.random.default_rng(5).normal(size=(evaluation, 7)).astype(np.float32)
    np.savez(tmp_path / "eval.npz", feat=x)
    return models.pipeline(tmp_path, "tiny.keras", "cal.npz", samples=CALIBRATION,
                           extra=f"evaluation: {{path: eval.npz}}\nverify: {{culprits: {culprits}}}\n"
                                 f"output: {{dir: out{culprits}}}\n")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> edgeconv.BuildResult:
    """The project without the per-op analysis, built once by the library for the tests that compare with it."""
    return edgeconv.build(_project(tmp_path_factory.mktemp("plain"), culprits=0))


def test_calibration_runs_once_with_the_per_op_error_ranking_and_changes_no_byte(
        tmp_path: Path, plain: edgeconv.BuildResult) -> None:
    seen: list[tuple[str, int, int]] = []
    ranked = edgeconv.build(_project(tmp_path, culprits=5), progress=lambda *a: seen.append(a))
    calibrating = [done for stage, done, _ in seen if stage == "calibrating"]
    # One pass over the samples: the count never starts again (the debugger reuses the calibration).
    assert calibrating[-1] == CALIBRATION and calibrating == sorted(calibrating)
    assert calibrating.count(CALIBRATION) == 1  # every pass over the samples ends with a report at the total
    assert ranked.report["culprits"] and ranked.report["culprits"][0]["source_layers"]
    assert plain.report["culprits"] is None
    assert ranked.tflite_path.read_bytes() == plain.tflite_path.read_bytes()


def _model_runs(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Samples run per model (by the sha256 of its bytes) through edgeconv's LiteRT runner from now on."""
    from edgeconv.verify.runner import TFLiteRunner

    counts: collections.Counter[str] = collections.Counter()
    init, run = TFLiteRunner.__init__, TFLiteRunner.run

    def counting_init(self: TFLiteRunner, data: bytes, **kw: bool) -> None:
        init(self, data, **kw)
        self.sha = hashlib.sha256(data).hexdigest()  # type: ignore[attr-defined]

    def counting_run(self: TFLiteRunner, feeds: Any) -> dict[str, Any]:
        counts[self.sha] += len(next(iter(feeds.values())))  # type: ignore[attr-defined]
        return run(self, feeds)

    monkeypatch.setattr(TFLiteRunner, "__init__", counting_init)
    monkeypatch.setattr(TFLiteRunner, "run", counting_run)
    return counts


def test_each_model_runs_over_the_evaluation_samples_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The float .tflite runs over the evaluation samples once (the activation-range check, recording its
    outputs for parity and the diagnosis) and the built .tflite once (the runtime check, recording them
    too): parity and the diagnosis of the failed gate read them back. With no room to record, they run the
    models again, and the report is the same to the last digit."""
    from edgeconv.verify import recorded

    pipeline = _project(tmp_path, culprits=0)
    pipeline.write_text(pipeline.read_text() + "gates: {min_sqnr_db: 99}\n")  # fails: the diagnosis runs
    counted: list[collections.Counter[str]] = []
    results = []
    for room in (recorded.RECORD_BYTES, 0):
        monkeypatch.setattr(recorded, "RECORD_BYTES", room)
        with monkeypatch.context() as patched:
            counted.append(_model_runs(patched))
            pipeline.write_text(re.sub(r"dir: \S+}", f"dir: out-{room}}}", pipeline.read_text()))
            results.append(edgeconv.build(pipeline))
    for counts, result, again in zip(counted, results, (0, 1)):
        assert not result.passed and result.report["diagnosis"]["causes"]
        built = hashlib.sha256(result.tflite_path.read_bytes()).hexdigest()
        assert counts.pop(built) == CALIBRATION + (1 + again) * EVALUATION
        # The float .tflite, the only other model run: the activation check on the evaluation samples, and on
        # the calibration samples for the tensor that clips (do its own values clip too?); the diagnosis on
        # the evaluation samples with the input rounded to its int8 levels; without the recording, parity's
        # and the diagnosis's reference runs too (the input's replay and the output's, which otherwise reads
        # the recording: no run).
        checks = [w["check"] for w in result.report["quantization"]["calibration"]["warnings"]]
        assert checks.count("activation_range") == 1
        assert list(counts.values()) == [(2 + 3 * again) * EVALUATION + CALIBRATION]
    for section in ("parity", "diagnosis"):
        assert results[0].report[section] == results[1].report[section]  # type: ignore[literal-required]
    assert results[0].tflite_path.read_bytes() == results[1].tflite_path.read_bytes()


def test_an_input_the_screen_clears_is_not_replayed_on_the_other_samples(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With 80 evaluation samples, the failing build's diagnosis replays the input (7 features, each over
    about 200 of its int8 levels: nothing against it) on the first 32 only: there it explains less than an
    eighth of the error, so the float .tflite runs the 80 samples once (the activation check, recorded for
    parity) and 32 more, not 80 more; and the input is no cause."""
    from edgeconv.verify import diagnosis

    pipeline = _project(tmp_path, culprits=0, evaluation=80)
    pipeline.write_text(pipeline.read_text() + "gates: {min_sqnr_db: 99}\n")
    counts = _model_runs(monkeypatch)
    result = edgeconv.build(pipeline)
    assert not result.passed and result.report["diagnosis"] is not None
    built = hashlib.sha256(result.tflite_path.read_bytes()).hexdigest()
    assert counts.pop(built) == CALIBRATION + 80
    checks = [w["check"] for w in result.report["quantization"]["calibration"]["warnings"]]
    clipped = CALIBRATION if "activation_range" in checks else 0  # do the tensor's own values clip too?
    assert list(counts.values()) == [80 + clipped + diagnosis.SCREEN]
    assert [c["id"] for c in result.report["diagnosis"]["causes"] if c["id"] in ("input_resolution",
                                                                                 "calibration_data")] == []


@pytest.fixture
def worker_pids(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The process ids of the converter workers started from now on, in order."""
    from edgeconv.converters import tflite_export

    started: list[int] = []
    original = tflite_export.Worker.start

    def start(self: tflite_export.Worker) -> None:
        original(self)
        assert self._proc is not None
        if self._proc.pid not in started:
            started.append(self._proc.pid)

    monkeypatch.setattr(tflite_export.Worker, "start", start)
    return started


def test_keep_float_trials_reuse_the_builds_worker(tmp_path: Path, worker_pids: list[int]) -> None:
    """One converter process serves the build and every keep_float trial: the workers started during
    the build are counted by their process ids."""
    model = models.hostile(tmp_path / "hostile.keras")
    x = np.random.default_rng(0).normal(size=(400, 12)).astype(np.float32)
    np.savez(tmp_path / "cal.npz", x=x[:200])
    np.savez(tmp_path / "eval.npz", x=x[200:], label=model.predict(x[200:], verbose=0).argmax(1))
    (tmp_path / "cpu.yaml").write_text(ANY_MODE_TARGET)
    (tmp_path / "pipeline.yaml").write_text(
        "version: 1\nmodel: {path: hostile.keras}\ncalibration: {path: cal.npz, samples: 200}\n"
        "evaluation: {path: eval.npz, labels: label}\ntargets: [cpu.yaml]\n"
        "gates: {min_top1_agreement: 0.95}\nverify: {suggest_keep_float: true}\n")
    result = edgeconv.build(tmp_path / "pipeline.yaml")
    assert len(result.report["keep_float_suggestion"]["steps"]) == 5  # five trial conversions
    assert len(worker_pids) == 1


def test_a_worker_killed_between_jobs_is_replaced(tmp_path: Path) -> None:
    from edgeconv.converters.tflite_export import Worker

    with Worker() as worker:
        worker.start()
        assert worker._proc is not None
        first = worker._proc.pid
        os.kill(first, signal.SIGKILL)
        worker._proc.wait()
        worker.start()  # what every job does first
        assert worker._proc is not None and worker._proc.pid != first and worker._proc.poll() is None


def test_the_report_gives_each_stage_time(plain: edgeconv.BuildResult) -> None:
    timings = json.loads((plain.output_dir / "report.json").read_text())["timings"]
    assert list(timings["stages_s"]) == ["load", "data", "passes", "convert", "check", "invoke", "verify", "report"]
    assert sum(timings["stages_s"].values()) == pytest.approx(timings["total_s"], abs=0.05)


def _job(tmp_path: Path, saved_model: Path, **changes: object) -> Path:
    np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32).tofile(tmp_path / "x.bin")
    job = {"saved_model": str(saved_model), "inputs": [{"name": "x", "shape": [3], "dtype": "float32",
                                                        "file": str(tmp_path / "x.bin")}],
           "count": 8, "batch_size": 1, "input_type": "int8", "output_type": "int8", "per_channel": True,
           "mode": "int8", "keep_float": [], "debug": None, "float_reference": False, **changes}
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "job.json").write_text(json.dumps({k: v for k, v in job.items() if v is not _MISSING}))
    return job_dir


_MISSING = object()


def test_the_worker_tells_a_converter_error_from_its_own_bug(tmp_path: Path) -> None:
    """The converter refusing the model is exit 2 (the user's to fix); edgeconv's own worker code failing is a
    bug, raised as one (exit 3 with a traceback), never reported as "the converter rejected the model"."""
    import tensorflow as tf

    from edgeconv.converters import _tflite_worker

    module = tf.Module()
    module.f = tf.function(lambda x: {"y": tf.nn.relu(x) * 2.0},
                           input_signature=[tf.TensorSpec((1, 3), tf.float32, name="x")])
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.f})
    (tmp_path / "a").mkdir()
    missing_model = _job(tmp_path / "a", tmp_path / "nowhere")
    assert _tflite_worker.convert(missing_model) == 2  # TensorFlow's own error: the converter's answer
    assert json.loads((missing_model / "error.json").read_text())["type"] == "OSError"
    (tmp_path / "b").mkdir()
    broken_job = _job(tmp_path / "b", tmp_path / "sm", mode=_MISSING)
    with pytest.raises(KeyError, match="mode"):  # edgeconv's code read a job it did not write: a bug
        _tflite_worker.convert(broken_job)
    assert not (broken_job / "error.json").exists()
    (tmp_path / "c").mkdir()
    good = _job(tmp_path / "c", tmp_path / "sm")
    assert _tflite_worker.convert(good) == 0 and (good / "model.tflite").stat().st_size > 0


def test_the_float_reference_is_the_float_model_the_conversion_calibrated(tmp_path: Path) -> None:
    """The float .tflite parity compares with is the model the build's conversion made before quantizing it:
    it has the ops, tensors and outputs a conversion with quantization off has (bit for bit on every sample),
    and the worker does not convert a second time for it."""
    import tensorflow as tf

    from edgeconv.converters import _tflite_worker
    from edgeconv.converters.tflite_reader import parse_tflite
    from edgeconv.verify.runner import TFLiteRunner

    keras = tf.keras
    inputs = keras.Input((11, 9, 3), batch_size=1, name="image")
    x = keras.layers.Conv2D(6, 3, padding="same", name="conv")(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.Activation("hard_silu", name="hswish")(x)
    y = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = keras.layers.Add(name="add")([x, keras.layers.ReLU(6.0, name="relu6")(y)])
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    outputs = keras.layers.Dense(4, activation="softmax", name="probs")(x)
    keras.Model(inputs, outputs).export(str(tmp_path / "sm"), verbose=False)  # signature serving_default
    samples = np.random.default_rng(3).normal(size=(8, 11, 9, 3)).astype(np.float32)
    samples.tofile(tmp_path / "x.bin")
    job = {"saved_model": str(tmp_path / "sm"), "inputs": [{"name": "image", "shape": [11, 9, 3],
                                                            "dtype": "float32", "file": str(tmp_path / "x.bin")}],
           "count": 8, "batch_size": 1, "input_type": "int8", "output_type": "int8", "per_channel": True,
           "mode": "int8", "keep_float": [], "debug": None, "float_reference": True}
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.json").write_text(json.dumps(job))
    _tflite_worker._FLOAT.clear()
    assert _tflite_worker.convert(tmp_path / "job") == 0
    assert _tflite_worker._FLOAT == {}  # no conversion of its own
    reference = (tmp_path / "job" / "float.tflite").read_bytes()
    converter = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "sm"), signature_keys=["serving_default"])
    converter.exclude_conversion_metadata = True
    separate = bytes(converter.convert())
    got, want = parse_tflite(reference), parse_tflite(separate)
    assert [(op.type, op.version, op.name) for op in got.ops] == [(op.type, op.version, op.name) for op in want.ops]
    assert [(t.name, t.shape, t.dtype) for t in got.main.tensors] == [(t.name, t.shape, t.dtype)
                                                                      for t in want.main.tensors]
    assert {op.type for op in got.ops} >= {"CONV_2D", "DEPTHWISE_CONV_2D", "HARD_SWISH", "ADD", "MEAN", "SOFTMAX"}
    runners = TFLiteRunner(reference), TFLiteRunner(separate)
    for sample in samples:
        a, b = (runner.run({"image": sample[None]}) for runner in runners)
        assert np.array_equal(a["output_0"], b["output_0"])


BLAS_PROBE = """
import json, os, sys
import numpy as np
from threadpoolctl import threadpool_info
before = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
from edgeconv.converters import _tflite_worker
read, write = os.pipe()
sys.stdin = open(os.devnull)  # no jobs: serve sets up and returns
assert _tflite_worker.serve(write) == 0
print(json.dumps([before, [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]]))
"""


def test_the_worker_runs_numpys_blas_on_one_thread(tmp_path: Path) -> None:
    """OpenBLAS starts a thread per CPU, and they spin after each call: in the worker they fought the
    converter for the CPUs of builds running side by side."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", BLAS_PROBE], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "OPENBLAS_NUM_THREADS": "2"},
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = json.loads(done.stdout)
    assert before == [2]  # NumPy's OpenBLAS, as the environment asks
    assert after and set(after) == {1}  # every BLAS loaded once TensorFlow is (it brings its own)


FREEZE_PROBE = """
import gc, os, sys
import tensorflow  # imported, its runtime not started: the build's state when it forks the worker
from edgeconv.converters._fork_server import Served
from edgeconv.converters.tflite_export import Worker
with Worker() as worker:
    worker.start()
    assert isinstance(worker._proc, Served), worker._proc  # forked by the template this process forked
    during = gc.get_freeze_count()
print(during, gc.get_freeze_count())
"""


def test_a_forked_worker_shares_the_builds_objects_until_it_ends(tmp_path: Path) -> None:
    """Forking the worker's template moves every object the build has (TensorFlow's modules) out of the
    collector's reach, so no process's full collection copies the shared pages; the build's end (leaving the
    Worker's with block) lifts it in the build process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FREEZE_PROBE], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    during, after = (int(n) for n in done.stdout.split())
    assert during > 100_000  # TensorFlow's import alone leaves hundreds of thousands of objects
    assert after == 0


@pytest.mark.parametrize(("verify", "closed_before_invoke"), [
    ("{culprits: 0}", True),  # nothing converts after the build's conversion: the worker ends there
    # its trials convert during the verification: the worker stays
    ("{suggest_keep_float: true}\ngates: {min_sqnr_db: 25}\ntargets: [cpu.yaml]", False),
])
def test_the_worker_ends_with_the_last_conversion_the_build_can_ask_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verify: str, closed_before_invoke: bool) -> None:
    from edgeconv.converters import tflite_export
    from edgeconv.verify import invoke

    events: list[str] = []
    close, invoke_all = tflite_export.Worker.close, invoke.invoke_all

    def closing(self: tflite_export.Worker) -> None:
        if self._proc is not None:
            events.append("close")
        close(self)

    monkeypatch.setattr(tflite_export.Worker, "close", closing)
    monkeypatch.setattr(invoke, "invoke_all", lambda *a, **k: events.append("invoke") or invoke_all(*a, **k))
    pipeline = _project(tmp_path, culprits=0)
    (tmp_path / "cpu.yaml").write_text(ANY_MODE_TARGET)
    pipeline.write_text(pipeline.read_text().replace("verify: {culprits: 0}", f"verify: {verify}"))
    edgeconv.build(pipeline)
    assert events[:2] == (["close", "invoke"] if closed_before_invoke else ["invoke", "close"])


def _pipelines(tmp_path: Path, hidden: dict[str, int]) -> dict[str, bytes]:
    """A pipeline per name, in its own folder (writing to out/), of a model with that many hidden units;
    returns each one's .tflite built alone by the library."""
    import keras

    for name, units in hidden.items():
        folder = tmp_path / name
        folder.mkdir()
        models.dense_model(folder / "m.keras", keras.layers.ReLU(name="act"), features=7, hidden=units, classes=5)
        models.calibration(folder / "cal.npz", samples=CALIBRATION, features=7, seed=units)
        models.pipeline(folder, "m.keras", "cal.npz", samples=CALIBRATION,
                        extra="targets: [generic-int8]\noutput: {dir: out}\n")
    return {name: edgeconv.build(tmp_path / name / "pipeline.yaml", out=tmp_path / f"alone-{name}"
                                 ).tflite_path.read_bytes() for name in hidden}


@pytest.fixture(scope="module")
def built_alone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """Three pipelines (models of 9, 11 and 13 hidden units) in their folders, and each one's .tflite built
    alone: shared by the tests that build several at once, each in a copy of the folders."""
    root = tmp_path_factory.mktemp("alone")
    return root, _pipelines(root, {"a": 9, "b": 11, "c": 13})


def _copied(built_alone: tuple[Path, dict[str, bytes]], tmp_path: Path, names: str) -> dict[str, bytes]:
    """The pipelines ``names`` copied into ``tmp_path``; their .tflite built alone."""
    root, alone = built_alone
    for n in names:
        shutil.copytree(root / n, tmp_path / n)
    return {n: alone[n] for n in names}


def test_the_builds_of_several_pipelines_share_one_worker_and_each_gets_its_own_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_pids: list[int],
        built_alone: tuple[Path, dict[str, bytes]]) -> None:
    """`edgeconv build a.yaml b.yaml -j 1`: one converter worker (one TensorFlow import) serves both builds,
    and each .tflite is byte for byte what the pipeline builds alone."""
    from edgeconv.cli import main

    alone = _copied(built_alone, tmp_path, "ab")
    monkeypatch.setenv("EDGECONV_NO_CACHE", "1")
    assert main(["build", str(tmp_path / "a" / "pipeline.yaml"), str(tmp_path / "b" / "pipeline.yaml"),
                 "-j", "1", "-q"]) == 0
    assert len(worker_pids) == 1
    assert {n: (tmp_path / n / "out" / "m.tflite").read_bytes() for n in ("a", "b")} == alone
    assert alone["a"] != alone["b"]


AUDIT_TF_IMPORT = '''
import os
import sys


def _hook(event, args):
    if event == "import" and args[0] == "tensorflow":
        with open(os.environ["TF_IMPORTS"], "a") as log:
            log.write(f"{os.getpid()}\\n")


sys.addaudithook(_hook)
'''


@pytest.mark.parametrize(("mode", "imports"), [("fork", 1), ("spawn", 4)])
def test_parallel_builds_import_tensorflow_once_and_leave_no_temporary_file(
        tmp_path: Path, mode: str, imports: int, built_alone: tuple[Path, dict[str, bytes]]) -> None:
    """`build a.yaml b.yaml c.yaml -j 2`: the pool's processes are the CLI forked after its TensorFlow import
    (one import for all; with EDGECONV_WORKER=spawn each of the 2 imports it, and so does its converter
    worker), each .tflite is what its pipeline builds alone, and the temporary folder is left empty (a fork
    ends without exit handlers: TensorFlow's autograph removes its generated files in them)."""
    import subprocess
    import sys

    alone = _copied(built_alone, tmp_path, "abc")
    names = list(alone)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(AUDIT_TF_IMPORT)
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "EDGECONV_NO_CACHE": "1", "EDGECONV_WORKER": mode, "TMPDIR": str(tmp_path / "tmp"),
           "TF_IMPORTS": str(tmp_path / "imports.log"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "edgeconv", "build", *(f"{n}/pipeline.yaml" for n in names),
                           "-j", "2", "-q"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "imports.log").read_text().split()) == imports
    assert {n: (tmp_path / n / "out" / "m.tflite").read_bytes() for n in names} == alone
    assert list((tmp_path / "tmp").iterdir()) == []


EXIT_PROBE = '''
import gc
import sys

from edgeconv.cli import program

code = program()
print(gc.get_freeze_count() > 0, "tensorflow" in sys.modules)
sys.exit(code)
'''


@pytest.mark.parametrize(("command", "frozen"), [("build", "True True"), ("validate", "False False")])
def test_the_command_leaves_tensorflows_objects_out_of_its_exit_collections(
        tmp_path: Path, command: str, frozen: str, plain: edgeconv.BuildResult) -> None:
    """`edgeconv build` ends with TensorFlow's objects frozen (the exit's collections over them took 0.6 s of
    every build) and everything written: the same .tflite as the library's build, a complete report; a
    command that did not import TensorFlow leaves the collector alone."""
    import subprocess
    import sys

    path = _project(tmp_path, culprits=0)
    done = subprocess.run([sys.executable, "-c", EXIT_PROBE, command, str(path), "-q"], cwd=tmp_path,
                          env={**os.environ, "EDGECONV_NO_CACHE": "1"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == frozen
    if command == "build":
        assert (tmp_path / "out0" / "tiny.tflite").read_bytes() == plain.tflite_path.read_bytes()
        assert json.loads((tmp_path / "out0" / "report.json").read_text())["gate"]["verdict"] == "pass"


# -- the workers of later builds: forked from the template the first build forked --------------------------

TEMPLATE_PROBE = """
import json, os, select, signal, sys
import edgeconv
from edgeconv.converters import tflite_export
from edgeconv.converters.tflite_export import Worker

def proc(pid, name):
    try:
        return open(f"/proc/{pid}/{name}", "rb").read()
    except OSError:
        return b""

def ppid(pid):
    return int(proc(pid, "stat").rsplit(b")", 1)[1].split()[1])

seen = {}
run = Worker.run
def running(self, *args, **kwargs):  # each worker after its first job: name, parent, whether an interpreter
    done = run(self, *args, **kwargs)
    pid = self._proc.pid
    seen.setdefault(pid, [pid, proc(pid, "comm").decode().strip(), ppid(pid),
                          b"-m" in proc(pid, "cmdline").split(b"\\0")])
    return done
Worker.run = running

held_r, held_w = os.pipe()  # a pipe this program opened before its first build
found = {"bytes": [], "prepared": edgeconv.prepare_builds()}
from edgeconv.cli import main
for out in ("a", "b", "c"):
    if out == "c":  # the command in this process (its build of one pipeline uses the template there is)
        assert main(["build", "pipeline.yaml", "--out", out, "-q"]) == 0
        found["bytes"].append(open("c/tiny.tflite", "rb").read().hex())
    else:
        found["bytes"].append(edgeconv.build("pipeline.yaml", out=out).tflite_path.read_bytes().hex())
    found.setdefault("workers", []).extend(seen.values())
    seen.clear()
template = tflite_export._TEMPLATE
found["template"] = [template.pid, proc(template.pid, "comm").decode().strip(), ppid(template.pid)]
os.close(held_w)
found["pipe_ends"] = bool(select.select([held_r], [], [], 10)[0]) and os.read(held_r, 1) == b""
with Worker() as worker:  # a worker's end, as the template saw it
    worker.start()
    os.kill(worker._proc.pid, signal.SIGSEGV)
    found["crash"] = worker._proc.wait()
child = os.fork()  # as `build -j` forks its processes: the template is not the child's to use
if child == 0:
    os._exit(0 if not template.usable() else 1)
found["child_ignores_it"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
os.kill(template.pid, signal.SIGKILL)  # the template dies: the next build's worker is a new interpreter
seen.clear()
found["bytes"].append(edgeconv.build("pipeline.yaml", out="d").tflite_path.read_bytes().hex())
found["after_death"] = list(seen.values())
found["prepared_late"] = edgeconv.prepare_builds()  # TensorFlow's runtime runs here now: no template to make
print(json.dumps(found))
"""


def test_later_builds_fork_their_workers_from_the_first_builds_template(tmp_path: Path) -> None:
    """A program building several times (``edgeconv.build`` in a loop) imports TensorFlow once: the first build
    forks a template (TensorFlow imported, its runtime not started), and every build's worker is forked from
    it, not started as a new interpreter importing TensorFlow again (about 7 s of CPU a build). Each worker is
    still a process of its own per build; the bytes are the same; a worker's crash is told by its signal;
    the template holds no pipe of the program's, is not used by a process forked from the program, and when
    it dies the next worker is a new interpreter. It ends with the program. ``edgeconv.prepare_builds()`` makes
    it before the program's own TensorFlow work, and says when it cannot."""
    import subprocess
    import sys

    _project(tmp_path, culprits=0)
    done = subprocess.run([sys.executable, "-c", TEMPLATE_PROBE], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    template, program = found["template"][0], found["template"][2]
    assert found["template"][1] == "edgeconv-forker"
    assert (found["prepared"], found["prepared_late"]) == (True, False)
    assert len(found["workers"]) == 3 and len({pid for pid, *_ in found["workers"]}) == 3
    assert [w[1:] for w in found["workers"]] == [["edgeconv-worker", template, False]] * 3
    assert program != template
    assert len(set(found["bytes"])) == 1
    assert found["pipe_ends"] is True
    assert found["crash"] == -signal.SIGSEGV
    assert found["child_ignores_it"] is True
    ((_, _, parent, interpreter),) = found["after_death"]
    assert interpreter is True and parent == program
    assert not Path(f"/proc/{template}").exists()
