"""Which INT8 ONNX agrees better with the INT8 .tflite edgeconv built? Side by side, one run.

A: the built int8 .tflite converted by tf2onnx's TFLite path (what edgeconv ships: the .tflite's
   own scales and zero points in QuantizeLinear/DequantizeLinear form).
B: ONNX Runtime's static QDQ quantization of edgeconv's float ONNX, calibrated on the very same
   calibration samples edgeconv drew (MinMax, per-channel int8 weights, int8 activations).

Both are compared with the .tflite on the held-out digits (top-1 agreement, max abs difference of
the dequantized outputs, accuracy).

    python scripts/compare_onnx_int8.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    import edgeconv
    from edgeconv.calibration import SOURCES
    from edgeconv.calibration.samples import collect
    from edgeconv.verify.runner import TFLiteRunner

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "examples", root / "examples")
        text = (REPO / "pipeline.yaml").read_text().replace("output:\n  dir: build/digits",
                                                            "output:\n  dir: build/digits\n  onnx: {}")
        (root / "pipeline.yaml").write_text(text)
        result = edgeconv.build(root / "pipeline.yaml")
        config = result.config
        out = result.output_dir
        # The calibration samples exactly as the build drew them (same source, seed and count).
        from edgeconv.converters.loaders import load_model

        inputs = load_model(config.model, config.source.parent).graph.inputs
        cal = config.calibration
        assert cal is not None
        reader = SOURCES["npz"]().open(cal, inputs, config.source.parent)
        (root / "spool").mkdir()
        samples = collect(reader, inputs, role="calibration", source="npz", samples=cal.samples, seed=cal.seed,
                          folder=root / "spool")
        assert samples.sha256 == result.report["quantization"]["calibration"]["samples_sha256"]

        class Reader(CalibrationDataReader):  # type: ignore[misc]
            def __init__(self) -> None:
                self.batches = samples.batches(1)

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.batches, None)

        ort_int8 = root / "ort_static.onnx"
        quantize_static(str(out / "digits.onnx"), str(ort_int8), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True)
        tfl = TFLiteRunner(result.tflite_path.read_bytes())
        a = ort.InferenceSession(str(out / "digits.int8.onnx"), providers=["CPUExecutionProvider"])
        b = ort.InferenceSession(str(ort_int8), providers=["CPUExecutionProvider"])
        data = np.load(REPO / "examples" / "digits" / "eval.npz")
        x, labels = data["image"].astype(np.float32), data["label"]
        want, got_a, got_b = [], [], []
        for xi in x:
            feeds = {"image": xi[None]}
            want.append(tfl.run(feeds)["digit"])
            got_a.append(tfl.dequantize({"digit": a.run(["digit"], tfl.raw_inputs(feeds))[0]})["digit"])
            got_b.append(b.run(["digit"], feeds)[0])
        w = np.concatenate(want)
        print(f"{len(x)} held-out digits; INT8 .tflite accuracy {np.mean(w.argmax(1) == labels):.2%}")
        for name, got in (("A tf2onnx from the int8 .tflite", got_a), ("B ORT quantize_static, same samples", got_b)):
            g = np.concatenate(got)
            print(f"{name}: top-1 agreement {np.mean(g.argmax(1) == w.argmax(1)):.2%}, max abs difference "
                  f"{np.abs(g - w).max():.4f}, accuracy {np.mean(g.argmax(1) == labels):.2%}")


if __name__ == "__main__":
    main()
