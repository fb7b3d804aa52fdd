"""What the repair search costs next to the build it repairs, side by side in one run.

    python scripts/bench_repair.py [--runs 3] [--trials 8] [--model digits|mobilenetv2-0.35-96]
                                   [--edgeconv-from OTHER_CHECKOUT]

Every run is a fresh ``edgeconv build --no-cache`` process on the same model and data, taking turns:

- ``default``: the pipeline as shipped (the example's data; for MobileNetV2 0.35 @ 96, keras.applications
  with random weights, seed 0, and 200 calibration / 100 evaluation samples of seeded noise), on one
  target that runs float ops and int16x8 (``arm-neon``), so that every kind of candidate applies;
- ``repair``: the same with a gate no change can meet (``min_sqnr_db: 90``) and ``repair: {enabled: true,
  max_trials: N, allow_interface_change: true}``: the search runs N trials and none passes, so nothing is
  rebuilt: the difference is the search itself.

Per variant: the median wall time and CPU time (the build and its converter worker), and the trials the
report lists with each one's seconds. The ratio is repair / default. ``--edgeconv-from`` adds both
variants run from another checkout (an older commit), in the same turns.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def _digits(root: Path) -> str:
    shutil.copytree(REPO / "examples", root / "examples")
    text = (REPO / "pipeline.yaml").read_text()
    start, end = text.index("targets:"), text.index("output:")
    return text[:start] + "targets: [arm-neon]\n" + text[end:]


def _mobilenet(root: Path) -> str:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    keras.utils.set_random_seed(0)
    keras.applications.MobileNetV2(alpha=0.35, input_shape=(96, 96, 3), weights=None).save(root / "model.keras")
    rng = np.random.default_rng(0)
    np.savez(root / "cal.npz", input_layer=rng.uniform(-1, 1, (200, 96, 96, 3)).astype(np.float32))
    np.savez(root / "eval.npz", input_layer=rng.uniform(-1, 1, (100, 96, 96, 3)).astype(np.float32))
    return ("version: 1\nname: mobilenet\nmodel: {path: model.keras, batch_size: 1}\n"
            "calibration: {path: cal.npz, samples: 200, seed: 0}\nevaluation: {path: eval.npz}\n"
            "quantization: {mode: int8}\ntargets: [arm-neon]\noutput: {dir: out}\n")


def run(root: Path, pipeline: str, code: Path = REPO) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "edgeconv", "build", pipeline, "-q", "--no-cache"], cwd=root,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(code)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{pipeline}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--model", choices=["digits", "mobilenetv2-0.35-96"], default="digits")
    parser.add_argument("--edgeconv-from", type=Path, default=None)
    args = parser.parse_args()
    codes = {"": REPO}
    if args.edgeconv_from is not None:
        codes[f" @ {args.edgeconv_from.name}"] = args.edgeconv_from.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = _digits(root) if args.model == "digits" else _mobilenet(root)
        base = base.replace("output:", "verify: {culprits: 3}\noutput:", 1) if "verify:" not in base else base
        (root / "default.yaml").write_text(base)
        (root / "repair.yaml").write_text(
            base + f"gates: {{min_sqnr_db: 90}}\nrepair: {{enabled: true, max_trials: {args.trials}, "
                   "allow_interface_change: true}\n")
        times: dict[str, list[tuple[float, float]]] = {f"{n}{c}": [] for c in codes for n in ("default", "repair")}
        out = root / "out" if args.model != "digits" else root / "build" / "digits"
        trials: list[dict[str, Any]] = []
        for _ in range(args.runs):
            for suffix, code in codes.items():
                for name in ("default", "repair"):
                    times[f"{name}{suffix}"].append(run(root, f"{name}.yaml", code))
                    if name == "repair" and not suffix:  # this checkout's search, trial by trial
                        trials = json.loads((out / "report.json").read_text())["repair"]["trials"]
    print(f"{args.model}, {args.runs} run(s) each, medians:")
    for name, runs in times.items():
        print(f"  {name:20s} wall {statistics.median(w for w, _ in runs):6.1f} s   "
              f"cpu {statistics.median(c for _, c in runs):6.1f} s   "
              f"({', '.join(f'{w:.1f}/{c:.1f}' for w, c in runs)})")
    for suffix in codes:
        ratio = (statistics.median(c for _, c in times[f"repair{suffix}"])
                 / statistics.median(c for _, c in times[f"default{suffix}"]))
        print(f"  repair / default{suffix} (CPU): {ratio:.2f}x")
    print(f"  the trials of this checkout's last search ({len(trials)}):")
    for t in trials:
        print(f"    trial {t['trial']}: {t['seconds']:5.1f} s  {t['change']}")


if __name__ == "__main__":
    main()
