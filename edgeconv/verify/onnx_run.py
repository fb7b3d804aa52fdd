"""Run an ONNX model with ONNX Runtime, by input and output name (needs ``edgeconv[onnx]``).

An INT8 ONNX model converted from the .tflite takes and gives what the .tflite takes and
gives (int8 in, int8 out): with ``quantization``, float feeds are quantized and outputs
dequantized with the .tflite's own parameters, and every raw output is compared with the
.tflite's on the same raw inputs (``exact_share``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .runner import TFLiteRunner


class OnnxRunner:
    def __init__(self, data: bytes, *, quantization: TFLiteRunner | None = None) -> None:
        import onnx
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # the same sums in the same order on every machine
        options.log_severity_level = 3
        self.session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        self.dtypes = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
                       for i in onnx.load_from_string(data).graph.input}
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.quantization = quantization
        self.values = 0
        self.same = 0

    def run_raw(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self.session.run(self.outputs, {n: np.asarray(feeds[n]).astype(t) for n, t in self.dtypes.items()})
        return dict(zip(self.outputs, values))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float in, float out."""
        q = self.quantization
        if q is None:
            return self.run_raw(feeds)
        raw = q.raw_inputs(feeds)
        got = self.run_raw(raw)
        want = q.run_raw(raw)
        for name, value in got.items():
            self.values += value.size
            self.same += int(np.sum(value == want[name]))
        return q.dequantize(got)

    def exact_share(self) -> float | None:
        """Share of raw output values equal to the .tflite's, bit for bit."""
        return self.same / self.values if self.values else None
