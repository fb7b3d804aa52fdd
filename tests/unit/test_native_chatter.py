"""LiteRT's C++ INFO lines never reach the console; a real warning from native code still does."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from edgeconv.verify.runner import native_chatter_to_log

from ..conftest import REPO


def test_known_info_lines_go_to_the_log_and_others_to_stderr(capfd: pytest.CaptureFixture[str],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="edgeconv"), native_chatter_to_log():
        os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")
        os.write(2, b"INFO: Replacing 7 node(s) with delegate (TfLiteXNNPackDelegate) node, yielding 1 partitions.\n")
        os.write(2, b"WARNING: op 'X' output0 tensor#7 shape mismatch\n")
    assert capfd.readouterr().err == "WARNING: op 'X' output0 tensor#7 shape mismatch\n"
    assert [r.getMessage() for r in caplog.records] == [
        "litert: INFO: Created TensorFlow Lite XNNPACK delegate for CPU.",
        "litert: INFO: Replacing 7 node(s) with delegate (TfLiteXNNPackDelegate) node, yielding 1 partitions."]


def test_stderr_is_restored_even_when_the_set_up_fails(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError), native_chatter_to_log():
        raise RuntimeError("bad model")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_a_real_interpreter_prints_nothing() -> None:
    """In a fresh process (LiteRT prints its line once per process): without the redirect, the plain
    interpreter prints it; through TFLiteRunner, nothing."""
    model = REPO / "tests" / "data" / "conv2d-relu.int8.tflite"
    plain = ("from ai_edge_litert.interpreter import Interpreter\n"
             f"i = Interpreter(model_content=open({str(model)!r}, 'rb').read()); i.allocate_tensors(); i.invoke()\n")
    ours = ("import numpy as np\nfrom edgeconv.verify.runner import TFLiteRunner\n"
            f"r = TFLiteRunner(open({str(model)!r}, 'rb').read())\n"
            "(name, index), = r.inputs.items()\n"
            "r.run({name: np.zeros(r.model.main.tensors[index].shape, np.float32)})\n")
    said = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
            for code in (plain, ours)]
    assert "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." in said[0]
    assert said[1] == ""
