"""Which routine the NumPy reference's GEMMs should end in: every CONV_2D and FULLY_CONNECTED GEMM of
MobileNetV2 1.0 224 INT8 (the shapes edgeconv.reference traces), with seeded int8 operands, three ways in one
run: int64 ``matmul`` (exact, NumPy's own loops, no BLAS), float64 ``matmul`` (BLAS ``dgemm``: exact while
K x 255 x 128 < 2^53), float32 ``matmul`` (BLAS ``sgemm``: exact only while K x 255 x 128 < 2^24, K < 514).

    python scripts/bench_gemm.py [--runs 3] [--model PATH]

The model is the one scripts/bench_reference.py builds (cached under /tmp). Prints the summed median time of
each way and how many GEMMs float32 gets wrong.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", type=Path)
    args = parser.parse_args()
    from edgeconv import reference
    from edgeconv.converters.tflite_reader import read_tflite
    from scripts.bench_reference import build_model

    path = args.model or build_model()
    model = read_tflite(path)
    spec = model.main.tensors[model.main.inputs[0]]
    x = np.random.default_rng(0).integers(-128, 128, spec.shape).astype(spec.dtype.value)
    shapes = [tuple(s.trace["gemm"]) for s in reference.run(model, {spec.name: x}).steps
              if s.op in ("CONV_2D", "FULLY_CONNECTED")]
    rng = np.random.default_rng(1)
    ways = {"int64 matmul (no BLAS)": np.int64, "float64 matmul (dgemm)": np.float64,
            "float32 matmul (sgemm)": np.float32}
    total = dict.fromkeys(ways, 0.0)
    wrong = 0
    for m, n, k in shapes:
        a = rng.integers(-128, 128, (m, k)).astype(np.int64) + rng.integers(0, 2, (m, k))  # input - zero point
        b = rng.integers(-127, 128, (k, n)).astype(np.int64)
        exact = a @ b
        for name, dtype in ways.items():
            left, right = a.astype(dtype), b.astype(dtype)
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                got = left @ right
                times.append(time.perf_counter() - start)
            total[name] += sorted(times)[args.runs // 2]
            if dtype is np.float32:
                wrong += not np.array_equal(got.astype(np.int64), exact)
    print(f"{len(shapes)} GEMMs of {path.name} (M x N x K from the reference's trace), median of {args.runs}:")
    print("| way | time (sum) |\n|---|---|")
    for name, seconds in total.items():
        print(f"| {name} | {seconds * 1000:.0f} ms |")
    print(f"float32 got {wrong} of {len(shapes)} GEMMs of random operands wrong (not exact)")
    # The worst operands: every product 128 x 127 (an input at -128 with zero point 0, a weight at -127).
    m, n, k = max(shapes, key=lambda s: s[2])
    a, b = np.full((m, k), -128, np.int64), np.full((k, n), -127, np.int64)
    a[:, 0] = -127  # one odd product: an odd sum past 2^24, which float32 cannot hold
    exact = a @ b
    for name, dtype in ways.items():
        got = (a.astype(dtype) @ b.astype(dtype)).astype(np.int64)
        print(f"worst-case operands, K = {k}: {name} {'exact' if np.array_equal(got, exact) else 'WRONG'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
