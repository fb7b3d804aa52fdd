"""The NumPy reference (edgeconv.reference) against LiteRT on MobileNetV2 1.0 224 INT8: time per inference and
peak memory, side by side in one run, and how many values of every tensor agree.

LiteRT's reference-kernel interpreter (OpResolverType.BUILTIN_REF) is tried first on the whole model;
ai-edge-litert 2.3.0's aborts on it, so the whole-model comparison is with LiteRT's builtin (optimized) kernels
without the XNNPACK delegate, which may round differently, and the reference kernels are timed side by side
with edgeconv.reference op by op (each op cut out alone, both sides on the same inputs, summed).

    python scripts/bench_reference.py [--runs 3] [--model PATH]

Without --model, MobileNetV2 1.0 224 (Keras, seeded random weights: the arithmetic is the same as a trained
one's) is converted to full-integer INT8 with seeded calibration data and cached under /tmp. Each side runs in
a process of its own (peak RSS from getrusage); the reference also checks every tensor against LiteRT's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # tests.tflite_edit cuts one-op models out of the benchmarked one
CACHE = Path("/tmp/edgeconv-bench-mobilenetv2-int8.tflite")

_SIDE = r"""
import json, resource, sys, time
import numpy as np
side, path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
from edgeconv.converters.tflite_reader import read_tflite
model = read_tflite(path)
spec = model.main.tensors[model.main.inputs[0]]
x = np.random.default_rng(0).integers(-128, 128, spec.shape).astype(spec.dtype.value)
times = []
if side.startswith("litert"):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    kind = OpResolverType.BUILTIN_REF if side == "litert-ref" else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = Interpreter(model_path=path, experimental_op_resolver_type=kind, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    for _ in range(runs):
        it.set_tensor(spec.index, x)
        start = time.perf_counter(); it.invoke(); times.append(time.perf_counter() - start)
    out = {t.name: it.get_tensor(t.index) for op in model.ops for t in op.outputs}
    np.savez(sys.argv[4], **out)
else:
    from edgeconv import reference
    for _ in range(runs):
        start = time.perf_counter()
        got = reference.run(model, {spec.name: x})
        times.append(time.perf_counter() - start)
    want = np.load(sys.argv[4])
    order = [t.name for op in model.ops for t in op.outputs]
    differ = {k: int(np.count_nonzero(got.tensors[k] != want[k])) for k in order}
    first = next((k for k in order if differ[k]), None)
    worst = max(int(np.abs(got.tensors[k].astype(np.int64) - want[k].astype(np.int64)).max()) for k in order)
    where = f"; the first differing tensor is op #{order.index(first)}'s, at most {worst} LSB" if first else ""
    print(f"the reference and LiteRT's builtin kernels differ on {sum(differ.values()):,} of "
          f"{sum(want[k].size for k in order):,} values in {sum(1 for v in differ.values() if v)} of {len(order)} "
          f"tensors{where}")
print(json.dumps({"side": side, "seconds": sorted(times)[len(times) // 2],
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def build_model() -> Path:
    if CACHE.exists():
        return CACHE
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3))
    rng = np.random.default_rng(0)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([rng.uniform(-1, 1, (1, 224, 224, 3)).astype(np.float32)]
                                                for _ in range(8))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    CACHE.write_bytes(converter.convert())
    return CACHE


def one_op(path: Path, k: int, runs: int = 3) -> str:
    """Op ``k`` alone (a one-op model cut out of the model, every non-constant input fed seeded values) through
    LiteRT's reference kernels and through edgeconv.reference: ``exact`` or ``differs``, then each side's
    median time for the op (seconds)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from edgeconv import reference
    from edgeconv.converters.tflite_reader import parse_tflite, read_tflite
    from tests.tflite_edit import edit

    op = read_tflite(path).ops[k]
    feeds_at = [t.index for t in op.inputs if t is not None and not t.constant]

    def only(m: object) -> None:
        sg = m.subgraphs[0]  # type: ignore[attr-defined]
        sg.operators = [sg.operators[k]]
        sg.inputs, sg.outputs = feeds_at, list(sg.operators[0].outputs)
        m.signatureDefs = []  # type: ignore[attr-defined]

    sub = edit(path.read_bytes(), only)
    model = parse_tflite(sub)
    rng = np.random.default_rng(k)
    it = Interpreter(model_content=sub, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    feeds = {}
    for i in feeds_at:
        t = model.main.tensors[i]
        info = np.iinfo(t.dtype.value)
        feeds[t.name] = rng.integers(info.min, info.max + 1, t.shape).astype(t.dtype.value)
        it.set_tensor(i, feeds[t.name])
    litert, numpy_ = [], []
    for _ in range(runs):
        start = time.perf_counter()
        it.invoke()
        litert.append(time.perf_counter() - start)
        start = time.perf_counter()
        got = reference.run(model, feeds).tensors
        numpy_.append(time.perf_counter() - start)
    same = all(np.array_equal(got[model.main.tensors[i].name], it.get_tensor(i)) for i in model.main.outputs)
    return f"{'exact' if same else 'differs'} {sorted(litert)[runs // 2]} {sorted(numpy_)[runs // 2]}"


def per_op(path: Path, runs: int) -> tuple[int, int, list[str], int, float, float]:
    """:func:`one_op` for every op, each in a process of its own (LiteRT's reference resolver aborts on some):
    how many ops, how many bit-exact, the others with what happened, how many LiteRT's reference kernels
    ran, and the sums of the two sides' times over those."""
    from edgeconv.converters.tflite_reader import read_tflite

    ops = read_tflite(path).ops
    exact, other, ran, litert, numpy_ = 0, [], 0, 0.0, 0.0
    for k, op in enumerate(ops):
        done = subprocess.run([sys.executable, __file__, "--one-op", str(k), "--model", str(path), "--runs",
                               str(runs)], capture_output=True, text=True)
        said = (done.stdout.strip().splitlines()[-1:] or [f"exit {done.returncode}"])[0].split()
        if said[0] in ("exact", "differs") and len(said) == 3:
            ran, litert, numpy_ = ran + 1, litert + float(said[1]), numpy_ + float(said[2])
        exact += said[0] == "exact"
        if said[0] != "exact":
            other.append(f"#{k} {op.type}: {' '.join(said[:2])}")
    return len(ops), exact, other, ran, litert, numpy_


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--one-op", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_op is not None:
        print(one_op(args.model, args.one_op, args.runs))
        return 0
    path = args.model or build_model()
    tensors = Path("/tmp/edgeconv-bench-litert-tensors.npz")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    rows = []
    for side in ("litert-ref", "litert-builtin", "reference"):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _SIDE, side, str(path), str(args.runs), str(tensors)],
                              capture_output=True, text=True, env=env)
        if done.returncode != 0:
            print(f"{side}: exit {done.returncode} ({done.stderr.strip().splitlines()[-1:] or 'no message'})")
            continue
        lines = done.stdout.strip().splitlines()
        rows.append({**json.loads(lines[-1]), "wall": time.perf_counter() - start})
        for line in lines[:-1]:
            print(line)
    ops, exact, wrong, ran, litert_ops, numpy_ops = per_op(path, args.runs)
    print(f"each op alone through LiteRT's reference kernels: {exact} of {ops} bit-exact"
          + (f" (not: {', '.join(wrong)})" if wrong else ""))
    print(f"model: {path} ({path.stat().st_size:,} bytes); median of {args.runs} inferences")
    print("| interpreter | time per inference | peak RSS |\n|---|---|---|")
    for r in rows:
        name = {"litert-ref": "LiteRT reference kernels (BUILTIN_REF)",
                "litert-builtin": "LiteRT builtin kernels, no delegate",
                "reference": "edgeconv.reference (NumPy)"}[r["side"]]
        print(f"| {name} | {r['seconds'] * 1000:.0f} ms | {r['peak_mib']:.0f} MiB |")
    print(f"| LiteRT reference kernels, the {ran} ops it runs, one by one (sum) | {litert_ops * 1000:.0f} ms | - |")
    print(f"| edgeconv.reference, the same ops one by one (sum) | {numpy_ops * 1000:.0f} ms | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
