"""Time `edgeconv check` against tf.lite.experimental.Analyzer.analyze on the same model.

    python scripts/bench_check.py [--repeat 5]

Builds an int8 keras.applications MobileNetV2 (224x224, alpha 1.0, static batch 1, untrained
weights) with edgeconv once, then, side by side in one run, times:
  - `edgeconv check MODEL --target edgetpu --target arm-neon --format json` as a fresh process
    (wall time, what a CI step pays; the process never imports TensorFlow),
  - edgeconv.check() in-process,
  - tf.lite.experimental.Analyzer.analyze(model_path=...) in-process (TensorFlow already imported),
  - a fresh process that imports TensorFlow and runs the Analyzer (its real CLI cost),
  - two floors, fresh processes that only read the .tflite and list its op types: with edgeconv's reader
    (struct over the bytes, no NumPy), and with flatc's generated reader (``ai_edge_litert.schema_py_generated``,
    flatbuffers and NumPy: what a script that lists ops without edgeconv runs).
  - the same `edgeconv check` with its exit left to the interpreter (an exit handler registered, so
    cli._end_check does not end the process once its console is flushed): what that exit costs.
Fresh processes are timed by wall clock and by CPU (user + system of the child), the variants taking turns;
the Analyzer's fresh process is also timed by CPU against `edgeconv check` (``--analyzer-cpu-runs``).
``--model M.tflite`` checks that model instead of building one (no TensorFlow needed for the fresh-process rows).
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
    samples = np.random.default_rng(0).uniform(-1, 1, (16, 224, 224, 3)).astype(np.float32)
    np.savez(folder / "cal.npz", **{name: samples})  # 16: a build refuses fewer than 10
    (folder / "p.yaml").write_text("version: 1\nmodel: {path: mobilenet_v2.keras}\n"
                                   "calibration: {path: cal.npz, samples: 16}\n")
    from edgeconv import build

    return build(folder / "p.yaml").tflite_path


def cpu_of(command: list[str], tree: Path | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of a fresh process running ``command`` (with ``tree``: the
    edgeconv of that checkout, first on its path)."""
    import resource

    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # From a neutral folder: `python -m` and `-c` put the working folder first on the path.
    subprocess.run(command, check=False, capture_output=True, env=env, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


FLOOR = ("import sys; from edgeconv.converters.tflite_reader import read_tflite; "
         "print(sorted({op.type for op in read_tflite(sys.argv[1]).ops}))")
FLATC_FLOOR = ("import sys; from ai_edge_litert import schema_py_generated as s\n"
               "m = s.Model.GetRootAs(open(sys.argv[1], 'rb').read(), 0)\n"
               "names = {v: k for k, v in vars(s.BuiltinOperator).items() if not k.startswith('_')}\n"
               "codes = [m.OperatorCodes(i) for i in range(m.OperatorCodesLength())]\n"
               "kinds = [names[max(c.BuiltinCode(), c.DeprecatedBuiltinCode())] for c in codes]\n"
               "print(sorted({kinds[g.Operators(o).OpcodeIndex()] for g in (m.Subgraphs(j) for j in "
               "range(m.SubgraphsLength())) for o in range(g.OperatorsLength())}))")
ANALYZER = "import sys, tensorflow as tf; tf.lite.experimental.Analyzer.analyze(model_path=sys.argv[1])"


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
    parser.add_argument("--model", type=Path, help="an int8 .tflite to check instead of building MobileNetV2")
    parser.add_argument("--analyzer-cpu-runs", type=int, default=3,
                        help="fresh Analyzer processes timed by CPU, each beside an `edgeconv check` (0: none)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another checkout of edgeconv (a worktree of an earlier commit): its `check` and "
                             "listing take turns with this one's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or build_model(Path(tmp))
        size = model.stat().st_size
        cli = [sys.executable, "-m", "edgeconv", "check", str(model), "--target", "edgetpu", "--target", "arm-neon",
               "--format", "json"]
        probe = "import sys; from edgeconv.cli import program; sys.argv[0] = 'edgeconv'; sys.exit(program())"
        # the same command, its exit left to the interpreter (an exit handler keeps cli._end_check from ending it)
        whole_exit = [sys.executable, "-c", "import atexit; atexit.register(int); " + probe, *cli[3:]]
        check_cli = timed(lambda: subprocess.run([sys.executable, "-c", probe, *cli[3:]], check=False,
                                                 capture_output=True), args.repeat)
        turns = [(cpu_of(cli)[1], cpu_of([sys.executable, "-c", FLOOR, str(model)])[1],
                  cpu_of([sys.executable, "-c", FLATC_FLOOR, str(model)])[1], cpu_of(whole_exit)[1])
                 for _ in range(args.repeat)]
        check_cpu, floor_cpu, flatc_cpu, whole_cpu = (statistics.median(t[i] for t in turns) for i in range(4))
        print(f"fresh processes, CPU s (median of {args.repeat}, taking turns): edgeconv check {check_cpu:.3f}; "
              f"reading and listing op types with edgeconv's reader {floor_cpu:.3f} ({check_cpu / floor_cpu:.2f}x), "
              f"with flatc's generated reader {flatc_cpu:.3f} ({check_cpu / flatc_cpu:.2f}x); the check with "
              f"the interpreter's exit {whole_cpu:.3f} ({whole_cpu / floor_cpu:.2f}x the reader's listing)")
        if args.baseline:
            here = Path(__file__).resolve().parent.parent
            pairs: dict[Path, list[tuple[float, float]]] = {}
            for _ in range(args.repeat):
                for tree in (args.baseline, here):
                    pairs.setdefault(tree, []).append(
                        (cpu_of(cli, tree)[1], cpu_of([sys.executable, "-c", FLOOR, str(model)], tree)[1]))
            for tree, runs in pairs.items():
                mine, floor = (statistics.median(r[i] for r in runs) for i in range(2))
                print(f"{tree}: edgeconv check {mine * 1000:.1f} ms CPU, its reader's listing {floor * 1000:.1f} ms "
                      f"({mine / floor:.2f}x; median of {args.repeat}, the two checkouts taking turns)")
        if args.analyzer_cpu_runs:
            runs = [(cpu_of(cli)[1], cpu_of([sys.executable, "-c", ANALYZER, str(model)])[1])
                    for _ in range(args.analyzer_cpu_runs)]
            mine, theirs = (statistics.median(r[i] for r in runs) for i in range(2))
            print(f"fresh processes, CPU s (median of {args.analyzer_cpu_runs}, taking turns): edgeconv check "
                  f"{mine:.3f}, Analyzer.analyze (imports TF) {theirs:.2f}: {mine / theirs:.3f}x")
        from edgeconv import check

        check_lib = timed(lambda: check(model, ["edgetpu", "arm-neon"]), args.repeat)
        import json

        from edgeconv.check_output import json_text

        data = check(model, ["edgetpu", "arm-neon"]).to_json()  # the JSON `check --format json` writes
        indented = timed(lambda: json.dumps(data, indent=2), args.repeat)
        one_line = timed(lambda: json_text(data), args.repeat)
        print(f"JSON of two targets ({len(json_text(data)):,} characters), median of {args.repeat}: "
              f"json.dumps(indent=2) {statistics.median(indented) * 1e3:.2f} ms, json_text (an op a line) "
              f"{statistics.median(one_line) * 1e3:.2f} ms")
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
