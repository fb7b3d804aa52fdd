"""A program calling ``edgeconv.build`` several times in one process, as a script or a test session does.

    python scripts/bench_builds_in_a_loop.py [--builds 4] [--keras-first] [--edgeconv-from OTHER_CHECKOUT]

Each variant is a fresh process that imports TensorFlow, optionally runs a Keras model first (a program
whose own TensorFlow work started the runtime before its first build: it then calls
``edgeconv.prepare_builds()`` first, where the checkout has it), then builds the shipped example
``--builds`` times into separate folders. Per build: wall time; per process: CPU of the process and all
its children (the converter workers), which is what the machine pays. ``--edgeconv-from`` runs the same
from another checkout (an older commit) for a before/after table; the variants take turns.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROGRAM = """
import json, os, sys, time
import edgeconv
import tensorflow as tf
if sys.argv[2] == "keras-first":
    if hasattr(edgeconv, "prepare_builds"):
        edgeconv.prepare_builds()
    import keras
    keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])(tf.zeros((1, 4)))  # the runtime starts
times = []
for i in range(int(sys.argv[1])):
    start = time.perf_counter()
    edgeconv.build("pipeline.yaml", out=f"out{i}")
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def run(checkout: Path, project: Path, builds: int, keras_first: bool) -> tuple[list[float], float]:
    env = {**os.environ, "EDGECONV_NO_CACHE": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-P", "-c", PROGRAM, str(builds), "keras-first" if keras_first else "-"],
                          cwd=project, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(done.stdout.splitlines()[-1]), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=4)
    parser.add_argument("--keras-first", action="store_true")
    parser.add_argument("--edgeconv-from", type=Path, default=None)
    args = parser.parse_args()
    checkouts = {"this checkout": REPO}
    if args.edgeconv_from is not None:
        checkouts[f"@ {args.edgeconv_from.name}"] = args.edgeconv_from.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        shutil.copytree(REPO / "examples", project / "examples")
        shutil.copy(REPO / "pipeline.yaml", project / "pipeline.yaml")
        print("| edgeconv | builds | wall of each build, s | process tree CPU, s |\n|---|---|---|---|")
        for name, checkout in checkouts.items():
            times, cpu = run(checkout, project, args.builds, args.keras_first)
            print(f"| {name} | {args.builds} | {', '.join(f'{t:.1f}' for t in times)} | {cpu:.1f} |", flush=True)


if __name__ == "__main__":
    main()
