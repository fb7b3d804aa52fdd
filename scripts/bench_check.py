"""Time `edgeconv check` against tf.lite.experimental.Analyzer.analyze on the same model.

    python scripts/bench_check.py [--repeat 5]

Builds an int8 keras.applications MobileNetV2 (224x224, alpha 1.0, static batch 1, untrained
weights) with edgeconv once, then, side by side in one run, times:
  - `edgeconv check MODEL --target edgetpu --target arm-neon --format json` as a fresh process
    (wall time, what a CI step pays; the process never imports TensorFlow),
  - edgeconv.check() in-process,
  - tf.lite.experimental.Analyzer.analyze(model_path=...) in-process (TensorFlow already imported),
  - a fresh process that imports TensorFlow and runs the Analyzer (its real CLI cost).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np


def build_model(folder: Path) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(224, 224, 3), weights=None)
    model.save(folder / "mobilenet_v2.keras")
    name = model.inputs[0]._keras_history.operation.name
    np.savez(folder / "cal.npz", **{name: np.random.default_rng(0).uniform(-1, 1, (8, 224, 224, 3)).astype(np.float32)})
    (folder / "p.yaml").write_text("version: 1\nmodel: {path: mobilenet_v2.keras}\n"
                                   "calibration: {path: cal.npz, samples: 8}\n")
    from edgeconv import build

    return build(folder / "p.yaml").tflite_path


def timed(fn, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp))
        size = model.stat().st_size
        cli = [sys.executable, "-m", "edgeconv", "check", str(model), "--target", "edgetpu", "--target", "arm-neon",
               "--format", "json"]
        probe = "import sys; from edgeconv.cli import main; main(sys.argv[1:]); assert 'tensorflow' not in sys.modules"
        check_cli = timed(lambda: subprocess.run([sys.executable, "-c", probe, *cli[3:]], check=False,
                                                 capture_output=True), args.repeat)
        from edgeconv import check

        check_lib = timed(lambda: check(model, ["edgetpu", "arm-neon"]), args.repeat)
        import tensorflow as tf

        def analyze() -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                tf.lite.experimental.Analyzer.analyze(model_path=str(model))

        analyzer_lib = timed(analyze, args.repeat)
        analyzer_cli = timed(lambda: subprocess.run(
            [sys.executable, "-c", "import sys, tensorflow as tf; tf.lite.experimental.Analyzer.analyze("
             "model_path=sys.argv[1])", str(model)], check=False, capture_output=True), args.repeat)

    def row(name: str, times: list[float]) -> str:
        return f"| {name} | {statistics.median(times) * 1000:.0f} ms | {min(times) * 1000:.0f} ms |"

    print(f"MobileNetV2 224 int8, {size / 1e6:.1f} MB, median and best of {args.repeat}:")
    print("| what | median | best |\n|---|---|---|")
    print(row("edgeconv check, fresh process (edgetpu + arm-neon, JSON)", check_cli))
    print(row("edgeconv.check() in-process", check_lib))
    print(row("Analyzer.analyze in-process (TF already imported)", analyzer_lib))
    print(row("Analyzer.analyze, fresh process (imports TF)", analyzer_cli))
    print(f"ratio fresh-process Analyzer / edgeconv check: "
          f"{statistics.median(analyzer_cli) / statistics.median(check_cli):.1f}x")


if __name__ == "__main__":
    main()
