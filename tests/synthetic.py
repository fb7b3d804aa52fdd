"""Synthetic ops and models (TF-free) for testing constraints one rule at a time."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeconv.converters.tflite_reader import OpInfo, Quantization, SubgraphInfo, TensorInfo, TensorType, TFLiteModel


class Builder:
    """Collects tensors (with constant data) for one op and makes the model around it."""

    def __init__(self) -> None:
        self.tensors: list[TensorInfo] = []
        self.data = bytearray()
        self.buffers: list[tuple[int, int]] = [(0, 0)]
        self.custom_code: str | None = None

    def tensor(self, dtype: str = "int8", shape: tuple[int, ...] = (1, 4), *, value: Any = None,
               scale: float | tuple[float, ...] | None = 0.05, zero_point: int = 0,
               signature: tuple[int, ...] | None = None, name: str | None = None) -> TensorInfo:
        kind = TensorType(dtype)
        quant = None
        if scale is not None and kind in (TensorType.INT8, TensorType.UINT8, TensorType.INT16, TensorType.INT32):
            scales = scale if isinstance(scale, tuple) else (scale,)
            quant = Quantization(scales, (zero_point,) * len(scales))
        buffer, nbytes = 0, 0
        if value is not None:
            array = np.asarray(value, dtype=np.dtype(dtype)).reshape(shape)
            raw = array.tobytes()
            buffer, nbytes = len(self.buffers), len(raw)
            self.buffers.append((len(self.data), len(raw)))
            self.data += raw
        t = TensorInfo(len(self.tensors), name or f"t{len(self.tensors)}", kind, shape, signature or shape, quant,
                       buffer, nbytes)
        self.tensors.append(t)
        return t

    def op(self, op_type: str, inputs: list[TensorInfo | None], outputs: list[TensorInfo], *,
           version: int = 1, custom_code: str | None = None, **options: Any) -> tuple[OpInfo, TFLiteModel]:
        op = OpInfo(0, 0, op_type, version, custom_code or self.custom_code, tuple(inputs), tuple(outputs), options)
        sg = SubgraphInfo(0, "main", tuple(self.tensors), (op,), (), ())
        model = TFLiteModel("synthetic", "0" * 64, 0, 3, "", (sg,), (), (), tuple(self.buffers), bytes(self.data))
        return op, model
