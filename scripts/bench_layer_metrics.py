"""The per-op error metrics of one tensor: float32 dot products in place against float64 widening.

    python scripts/bench_layer_metrics.py [--elements 1204224] [--runs 20]
                                          [--debug-model DEBUG.tflite --data EVAL.npz --samples 16]

A ReLU-like float output (normal values, 30 % zeros) and its int8 quantization (scale 0.05, zero point
-3), at the size of an EfficientNetB0 expansion (112 x 112 x 96 by default): the metrics the worker
computes per quantized op and sample (edgeconv/converters/_tflite_worker.py ``_tensor_metrics``) against
the same metrics widened to float64, as TF's QuantizationDebugger metrics were written before. Milliseconds
per call (median of --runs) and the largest relative difference of the results.

With ``--debug-model`` (a model from ``mlir_quantize(..., enable_numeric_verify=True)``) and ``--data`` (an
.npz whose first array holds its input samples): CPU milliseconds per sample of ``debug_statistics`` and of
the debug model's invoke alone, each with one new interpreter's set-up (XNNPACK packs the weights on the
first invoke): the difference is the metrics.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeconv.converters._tflite_worker import _tensor_metrics, debug_statistics


def widened(diffs: np.ndarray, f: np.ndarray, q: np.ndarray, scale: float, zero_point: int) -> tuple[Any, ...]:
    """The same metrics with float64 copies (the debugger's default metrics and the earlier worker's)."""
    wide = np.ravel(f).astype(np.float64)
    noise = wide - (np.ravel(q).astype(np.float64) - zero_point) * scale
    live = np.abs(np.ravel(f)) > 1e-6
    count = np.count_nonzero(live)
    erased = float(np.count_nonzero(np.ravel(q)[live] == zero_point) / count) if count else 0.0
    return (diffs.size, np.max(np.abs(diffs)), np.average(diffs ** 2), erased, float(wide @ wide / wide.size),
            float(noise @ noise / noise.size))


def _ms(fn: Any, args: tuple[Any, ...], runs: int) -> tuple[float, tuple[Any, ...]]:
    out = fn(*args)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, out


def _per_sample(debug_model: bytes, data: np.ndarray, samples: int) -> None:
    from ai_edge_litert.interpreter import Interpreter

    batches = [[data[k:k + 1]] for k in range(samples + 1)]
    start = time.process_time()
    debug_statistics(debug_model, batches)
    whole = time.process_time() - start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        interpreter = Interpreter(model_content=debug_model, experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    index = interpreter.get_input_details()[0]["index"]
    start = time.process_time()
    for b in batches:
        interpreter.set_tensor(index, b[0])
        interpreter.invoke()
    invoke = time.process_time() - start
    print(f"debug_statistics {whole / len(batches) * 1000:.0f} ms a sample, the invoke alone "
          f"{invoke / len(batches) * 1000:.0f} ms ({len(batches)} samples, the first's set-up included in both)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=112 * 112 * 96)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--debug-model", type=Path, default=None)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--samples", type=int, default=16)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    f = rng.normal(0, 1, args.elements).astype(np.float32)
    f[rng.random(args.elements) < 0.3] = 0.0
    scale, zero_point = 0.05, -3
    q = np.clip(np.round(f / scale) + zero_point, -128, 127).astype(np.int8)
    diffs = (f - (q.astype(np.float32) - zero_point) * scale).astype(np.float32)
    fast, got = _ms(_tensor_metrics, (diffs, f, q, scale, zero_point), args.runs)
    slow, want = _ms(widened, (diffs, f, q, scale, zero_point), args.runs)
    worst = max(abs(float(g) - float(w)) / abs(float(w)) for g, w in zip(got, want) if float(w))
    print(f"{args.elements:,} values: in place (float32 dots) {fast:.2f} ms, widened to float64 {slow:.2f} ms "
          f"({slow / fast:.1f}x); largest relative difference {worst:.2g}")
    if args.debug_model is not None and args.data is not None:
        data = np.load(args.data)
        _per_sample(args.debug_model.read_bytes(), data[data.files[0]].astype(np.float32), args.samples)


if __name__ == "__main__":
    main()
