"""Run a .tflite with the LiteRT interpreter, by input and output name, in float.

Integer inputs are quantized and integer outputs dequantized with the scale and zero
point the model declares, so float and quantized models compare directly. No
TensorFlow: only ``ai-edge-litert``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_import
from .._log import get_logger
from ..converters.tflite_reader import TFLiteModel, parse_tflite

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


log = get_logger(__name__)
_CHATTER = re.compile(r"^INFO: (Created TensorFlow Lite XNNPACK delegate for CPU"
                      r"|Replacing \d+ node\(s\) with delegate)")


@contextlib.contextmanager
def native_chatter_to_log() -> Iterator[None]:
    """LiteRT's C++ logger prints "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." to the
    process's stderr when an interpreter is set up, whatever the log level (no switch reaches it from
    Python). Around that set-up, file descriptor 2 goes to a temporary file: the known INFO lines go to
    edgeconv's log at debug level, anything else (a real warning) back to stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            for line in caught.read().decode(errors="replace").splitlines():
                if _CHATTER.match(line):
                    log.debug("litert: %s", line)
                elif line.strip():
                    print(line, file=sys.stderr)


def quantize(x: np.ndarray, dtype: np.dtype[Any], scale: float, zero_point: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale + zero_point), info.min, info.max).astype(dtype)


class TFLiteRunner:
    """One interpreter over a model. ``reference=True`` uses TFLite's reference kernels (what
    golden vectors are computed with); ``keep_tensors=True`` keeps every intermediate tensor."""

    def __init__(self, data: bytes, *, reference: bool = False, keep_tensors: bool = False) -> None:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        self.model: TFLiteModel = parse_tflite(data, "model.tflite")
        resolver = OpResolverType.BUILTIN_REF if reference else OpResolverType.AUTO
        with native_chatter_to_log(), warnings.catch_warnings():
            # LiteRT warns that keeping every tensor is for debugging: it is what edgeconv asks it for.
            warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors")
            self.interpreter = Interpreter(model_content=data, experimental_op_resolver_type=resolver,
                                           experimental_preserve_all_tensors=keep_tensors)
            self.interpreter.allocate_tensors()
        sg = self.model.main
        sig = self.model.signatures[0] if self.model.signatures else None
        self.inputs = dict(sig.inputs) if sig else {sg.tensors[i].name: i for i in sg.inputs}
        self.outputs = dict(sig.outputs) if sig else {sg.tensors[i].name: i for i in sg.outputs}

    def _quant(self, index: int) -> tuple[np.dtype[Any], float, int] | None:
        t = self.model.main.tensors[index]
        dtype = np.dtype(t.dtype.value)
        if dtype.kind in "iu" and t.quantization is not None and t.quantization.scale:
            zp = t.quantization.zero_point[0] if t.quantization.zero_point else 0
            return dtype, t.quantization.scale[0], zp
        return None

    def raw_inputs(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The values the model takes: float feeds quantized where the input is an integer type."""
        out = {}
        for name, index in self.inputs.items():
            q = self._quant(index)
            x = np.asarray(feeds[name])
            out[name] = quantize(x, *q) if q is not None else x.astype(self.model.main.tensors[index].dtype.value)
        return out

    def run_raw(self, raw: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name, index in self.inputs.items():
            self.interpreter.set_tensor(index, raw[name])
        self.interpreter.invoke()
        return {name: np.array(self.interpreter.get_tensor(index)) for name, index in self.outputs.items()}

    def dequantize(self, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for name, value in outputs.items():
            q = self._quant(self.outputs[name])
            out[name] = ((value.astype(np.float64) - q[2]) * q[1]).astype(np.float32) if q is not None else \
                value.astype(np.float32)
        return out

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float in, float out."""
        return self.dequantize(self.run_raw(self.raw_inputs(feeds)))

    def tensors(self) -> dict[int, np.ndarray]:
        """Every tensor with data after the last run (needs ``keep_tensors``)."""
        out = {}
        for t in self.model.main.tensors:
            try:
                value = self.interpreter.get_tensor(t.index)
            except ValueError:
                continue
            if value is not None:
                out[t.index] = np.array(value)
        return out
