"""A converter rejection is the user's (exit 2), a bug in edgeconv is ours (exit 3): told apart by the
package of each traceback frame's module, whatever folder the install lies in (a virtualenv inside a
clone named edgeconv put "/edgeconv/" in TensorFlow's paths, and rejections became "internal error")."""

from __future__ import annotations

import types
from typing import Any

import pytest

from edgeconv.converters._tflite_worker import _raised_by_edgeconv, _raised_in

INSTALLS = ["/home/ci/edgeconv/.venv/lib/python3.11/site-packages", "/opt/venv/lib/python3.11/site-packages",
            "/work/edgeconv/edgeconv/.venv/lib/site-packages"]


def _frames(*chain: tuple[str, str]) -> Any:
    """Functions calling one another, each compiled as the module ``name`` from the file ``path``; the last
    raises. Returns the first."""
    callee: Any = None
    for name, path in reversed(chain):
        globals_: dict[str, Any] = {"__name__": name, "__spec__": types.SimpleNamespace(name=name), "callee": callee}
        body = "def f():\n    return callee()\n" if callee is not None else "def f():\n    raise ValueError('x')\n"
        exec(compile(body, path, "exec"), globals_)
        callee = globals_["f"]
    return callee


def _raise(chain: list[tuple[str, str]]) -> BaseException:
    with pytest.raises(ValueError) as info:
        _frames(*chain)()
    return info.value


@pytest.mark.parametrize("site", INSTALLS)
def test_a_converter_rejection_is_never_edgeconvs_bug_whatever_the_install_path(site: str) -> None:
    exc = _raise([("edgeconv.converters._tflite_worker", f"{site}/edgeconv/converters/_tflite_worker.py"),
                  ("tensorflow.lite.python.lite", f"{site}/tensorflow/lite/python/lite.py"),
                  ("tensorflow.lite.python.convert", f"{site}/tensorflow/lite/python/convert.py")])
    assert not _raised_by_edgeconv(exc)


@pytest.mark.parametrize("site", INSTALLS)
def test_edgeconvs_own_error_after_the_converter_returned_is_a_bug(site: str) -> None:
    exc = _raise([("edgeconv.converters._tflite_worker", f"{site}/edgeconv/converters/_tflite_worker.py"),
                  ("numpy", f"{site}/numpy/core/fromnumeric.py")])
    assert _raised_by_edgeconv(exc)


def test_the_worker_run_as_main_is_still_edgeconv() -> None:
    """``python -m edgeconv.converters._tflite_worker``: its module is __main__ by name, itself by spec."""
    globals_: dict[str, Any] = {"__name__": "__main__",
                                "__spec__": types.SimpleNamespace(name="edgeconv.converters._tflite_worker")}
    exec(compile("def f():\n    raise ValueError('x')\n", "/tmp/anywhere/worker.py", "exec"), globals_)
    with pytest.raises(ValueError) as info:
        globals_["f"]()
    assert _raised_by_edgeconv(info.value)


def test_the_quantizer_is_told_by_its_package() -> None:
    exc = _raise([("edgeconv.converters._tflite_worker", "/x/edgeconv/w.py"),
                  ("ai_edge_quantizer.quantizer", "/home/edgeconv/.venv/ai_edge_quantizer/quantizer.py")])
    assert _raised_in(exc, "ai_edge_quantizer") and not _raised_in(exc, "tensorflow")
    assert not _raised_by_edgeconv(exc)
