"""Calibration memory and throughput: edgeconv's streamed calibration vs a hand-written
``representative_dataset`` generator over the same data, side by side in one run.

    python scripts/bench_calibration.py [--sizes 1000 10000] [--work DIR]

Data: an uncompressed .npz of 48x48x3 float32 images (27.6 KB a sample; 10,000 samples
are 276 MB on disk), smooth random fields so they pass as real data. Model: a small
conv net. Each measurement runs in a fresh process:

- edgeconv: ``edgeconv.build`` of a pipeline that calibrates on N samples of the .npz.
  Peak RSS of the edgeconv process and of its converter worker (ru_maxrss), and the
  converter's calibration rate from the worker's progress reports.
- baseline: what people write by hand: ``np.load(...)["image"]``, a generator yielding
  ``[x[i:i+1]]``, ``TFLiteConverter.from_saved_model`` with the same settings. Peak RSS
  of the process and the rate at which the converter consumed the generator.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
SHAPE = (48, 48, 3)


def make_data(work: Path, count: int) -> Path:
    import numpy as np

    path = work / f"images_{count}.npz"
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:SHAPE[0], 0:SHAPE[1]]
    # np.savez writes each array in one piece: build it in chunks through a memory map.
    tmp = work / f"images_{count}.npy"
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(count, *SHAPE))
    for start in range(0, count, 500):
        n = min(500, count - start)
        phase = rng.uniform(0, 6.3, size=(n, 1, 1, 3))
        freq = rng.uniform(0.05, 0.3, size=(n, 1, 1, 3))
        out[start:start + n] = (0.5 + 0.5 * np.sin(freq * (xx + yy)[None, :, :, None] + phase)).astype(np.float32)
    out.flush()
    del out
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        archive.write(tmp, "image.npy")
    tmp.unlink()
    return path


def make_model(work: Path) -> Path:
    path = work / "bench.keras"
    if path.exists():
        return path
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input(SHAPE, name="image")
    x = keras.layers.Conv2D(16, 3, strides=2, activation="relu", name="c1")(inp)
    x = keras.layers.Conv2D(32, 3, strides=2, activation="relu", name="c2")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    keras.Model(inp, keras.layers.Dense(10, name="head")(x)).save(path)
    return path


def run_edgeconv(work: Path, data: Path, n: int) -> dict[str, float]:
    import edgeconv

    pipeline = work / f"pipeline_{n}.yaml"
    pipeline.write_text(f"version: 1\nmodel: {{path: bench.keras}}\ncalibration: {{path: {data.name}, samples: {n}, "
                        f"min_samples: 10}}\noutput: {{dir: out_{n}}}\n")
    stamps: list[tuple[float, int]] = []

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "calibrating":
            stamps.append((time.monotonic(), done))

    start = time.monotonic()
    edgeconv.build(pipeline, progress=progress)
    total = time.monotonic() - start
    (t0, d0), (t1, d1) = stamps[0], stamps[-1]
    return {"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
            "rate": (d1 - d0) / (t1 - t0), "build_s": total}


def run_baseline(work: Path, data: Path, n: int) -> dict[str, float]:
    import numpy as np
    import tensorflow as tf

    saved = work / "bench_savedmodel"
    if not saved.exists():
        import keras

        keras.models.load_model(work / "bench.keras").export(str(saved), verbose=False)
    images = np.load(data)["image"]  # what the hand-written loop does: the whole array in memory
    picked = images[np.sort(np.random.default_rng(0).choice(len(images), n, replace=False))]
    stamps: list[float] = []

    def representative() -> object:
        for i in range(n):
            stamps.append(time.monotonic())
            yield [picked[i:i + 1]]

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    converter.convert()
    return {"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rate": (n - 1) / (stamps[-1] - stamps[0])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--role", choices=("edgeconv", "baseline"))
    parser.add_argument("--n", type=int)
    args = parser.parse_args()
    if args.role:
        work = args.work
        os.chdir(work)
        data = work / f"images_{max(args.sizes)}.npz"
        result = (run_edgeconv if args.role == "edgeconv" else run_baseline)(work, data, args.n)
        print("RESULT " + json.dumps(result))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="edgeconv-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data = make_data(work, max(args.sizes))
    make_model(work)
    print(f"data: {data} ({data.stat().st_size / 1e6:.0f} MB, {max(args.sizes)} samples of {SHAPE} float32)")
    rows = []
    for n in args.sizes:
        row: dict[str, object] = {"samples": n}
        for role in ("edgeconv", "baseline"):
            proc = subprocess.run([sys.executable, __file__, "--role", role, "--n", str(n), "--work", str(work),
                                   "--sizes", *map(str, args.sizes)], capture_output=True, text=True)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(f"{role} n={n} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            row[role] = json.loads(line[7:])
        rows.append(row)
    print(f"{'samples':>8} | {'edgeconv peak MB':>16} | {'its worker MB':>13} | {'edgeconv samples/s':>18} | "
          f"{'hand-written peak MB':>20} | {'hand-written samples/s':>22}")
    for row in rows:
        e, b = row["edgeconv"], row["baseline"]
        assert isinstance(e, dict) and isinstance(b, dict)
        print(f"{row['samples']:>8} | {e['peak_mb']:>16.0f} | {e['worker_peak_mb']:>13.0f} | {e['rate']:>18.0f} | "
              f"{b['peak_mb']:>20.0f} | {b['rate']:>22.0f}")
    if len(rows) >= 2:
        first, last = rows[0]["edgeconv"], rows[-1]["edgeconv"]
        assert isinstance(first, dict) and isinstance(last, dict)
        for key in ("peak_mb", "worker_peak_mb"):
            print(f"edgeconv {key}: {last[key] / first[key] - 1:+.1%} from {rows[0]['samples']} to "
                  f"{rows[-1]['samples']} samples")


if __name__ == "__main__":
    main()
