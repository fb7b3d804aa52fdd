"""Inputs are regular files: a FIFO named as the model hung `build` and `check` forever (and `validate`
called it valid), a link to /dev/zero was read until the OOM killer ended edgeconv. Each is exit 2 with
the file named, at once, and nothing is written."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import REPO, tree

TFLITE = REPO / "tests" / "data" / "conv2d-relu.int8.tflite"


def edgeconv(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgeconv", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)  # a hang fails the test instead of blocking the suite


@pytest.fixture(params=["fifo", "dev_zero", "dev_null", "socket"])
def special(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A special file's maker and the words edgeconv uses for it."""
    kind = str(request.param)
    sock: socket.socket | None = None

    def make(path: Path) -> None:
        nonlocal sock
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dev_zero":
            path.symlink_to("/dev/zero")
        elif kind == "dev_null":
            path.symlink_to("/dev/null")
        else:
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(str(path))

    words = {"fifo": "a FIFO (named pipe)", "dev_zero": "a character device", "dev_null": "a character device",
             "socket": "a socket"}[kind]
    request.node.make = make
    yield kind, words
    if sock is not None:
        sock.close()


def _project(tmp_path: Path, model: str = "m.tflite") -> Path:
    (tmp_path / "pipeline.yaml").write_text(f"version: 1\nmodel: {{path: {model}}}\ntargets: [generic-int8]\n")
    return tmp_path / "pipeline.yaml"


def test_a_special_file_as_the_model_is_refused_by_validate_check_and_build(
        tmp_path: Path, request: pytest.FixtureRequest, special: tuple[str, str]) -> None:
    _, words = special
    request.node.make(tmp_path / "m.tflite")
    _project(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for command in (["validate", "pipeline.yaml"], ["build", "pipeline.yaml", "--no-cache"]):
        done = edgeconv(*command, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            f"edgeconv: error: pipeline.yaml:2: model.path: 'm.tflite' is {words}, not a regular file")
    done = edgeconv("check", "m.tflite", "--target", "generic-int8", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"edgeconv: error: m.tflite: is {words}, not a regular file; expected a .tflite file"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_special_file_as_the_pipeline_or_a_target_file_is_refused(
        tmp_path: Path, request: pytest.FixtureRequest, special: tuple[str, str]) -> None:
    _, words = special
    request.node.make(tmp_path / "p.yaml")
    done = edgeconv("validate", "p.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"edgeconv: error: p.yaml: is {words}, not a regular file; expected a YAML file"
    request.node.make(tmp_path / "npu.yaml")
    done = edgeconv("check", str(TFLITE), "--target", "npu.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"edgeconv: error: npu.yaml: is {words}, not a regular file; expected a YAML file"


def test_a_special_file_as_a_report_is_refused(tmp_path: Path, request: pytest.FixtureRequest,
                                               special: tuple[str, str]) -> None:
    _, words = special
    request.node.make(tmp_path / "report.json")
    shutil.copy(TFLITE, tmp_path / "m.tflite")
    done = edgeconv("diff", "report.json", "report.json", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"edgeconv: error: report.json: is {words}, not a regular file; expected a "
                                   "report.json")


def test_a_special_file_as_calibration_data_is_refused_by_validate(tmp_path: Path) -> None:
    shutil.copy(TFLITE, tmp_path / "m.tflite")
    os.mkfifo(tmp_path / "cal.npz")
    (tmp_path / "pipeline.yaml").write_text("version: 1\nmodel: {path: m.tflite}\ncalibration: {path: cal.npz}\n")
    done = edgeconv("validate", "pipeline.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert ("pipeline.yaml:3: calibration.path: 'cal.npz' is a FIFO (named pipe), not a regular file"
            in done.stderr)


@pytest.mark.parametrize(("limit", "size", "ok"), [(16, 16, True), (16, 17, False)])
def test_an_input_is_read_up_to_its_limit(tmp_path: Path, limit: int, size: int, ok: bool) -> None:
    from edgeconv import EdgeconvError
    from edgeconv.inputs import read_bytes

    (tmp_path / "f").write_bytes(b"x" * size)
    if ok:
        assert read_bytes(tmp_path / "f", limit) == b"x" * size
    else:
        with pytest.raises(EdgeconvError) as info:
            read_bytes(tmp_path / "f", limit, what="report.json")
        assert str(info.value).endswith("f: 17 bytes; a report.json may have at most 16")


@pytest.mark.parametrize(("change", "problem"), [
    ("no_zero_points", "has 1 scale(s) and 0 zero point(s); TFLite loads only a model whose quantized tensors have "
                       "as many of each"),
    ("three_zero_points", "has 1 scale(s) and 3 zero point(s); TFLite loads only a model whose quantized tensors "
                          "have as many of each"),
])
@pytest.mark.parametrize("target", ["generic-int8", "edgetpu", "arm-neon", "tflm-cmsis-nn"])
def test_malformed_quantization_is_a_clear_error_for_every_target(tmp_path: Path, change: str, problem: str,
                                                                 target: str) -> None:
    """An output with scales but no zero points crashed `check --target generic-int8` (exit 3)."""
    from ..tflite_edit import edit

    def mutate(model: object) -> None:
        graph = model.subgraphs[0]  # type: ignore[attr-defined]
        out = graph.tensors[graph.outputs[0]]
        out.quantization.zeroPoint = None if change == "no_zero_points" else [0, 1, 2]

    (tmp_path / "m.tflite").write_bytes(edit(TFLITE.read_bytes(), mutate))
    before = tree(tmp_path)
    done = edgeconv("check", "m.tflite", "--target", target, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("edgeconv: error: m.tflite: invalid TFLite model: tensor ") and line.endswith(problem)
    assert tree(tmp_path) == before
