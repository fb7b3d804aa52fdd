"""Each target's runtime against edgeconv's reference (edgeconv.reference.drift), for the README's drift table:
the shipped example (its built .tflite, its first evaluation samples) and MobileNetV2 1.0 224 INT8 (seeded
random weights and inputs, as scripts/bench_reference.py builds it).

    python scripts/drift_table.py [--samples 4] [--example build/digits/digits.tflite]

Prints one Markdown row per model and runtime: the largest difference in LSBs on any op output the runtime
exposes, how many op outputs differ, and the share of all compared values that differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def rows(name: str, path: Path, samples: list[dict[int, np.ndarray]]) -> list[str]:
    from edgeconv.converters.tflite_reader import read_tflite
    from edgeconv.reference import drift

    model = read_tflite(path)
    data = path.read_bytes()
    measured = drift.measure(data, model, samples, list(drift.RUNTIMES))
    out = []
    for kind, r in measured.items():
        if r.get("error"):
            out.append(f"| {name} | {kind} | not compared: {r['error']} | | |")
            continue
        out.append(f"| {name} | {kind} | {r['max_lsb']} | {len(r['ops'])} of {r['tensors_compared']} | "
                   + (", ".join(f"#{d['op']} {d['type']} {d['differ']:.2%}" for d in r["ops"][:3]) or "-")
                   + (" ..." if len(r["ops"]) > 3 else "") + " |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--example", type=Path, default=REPO / "build" / "digits" / "digits.tflite")
    args = parser.parse_args()
    from bench_reference import build_model  # type: ignore[import-not-found]

    from edgeconv.converters.tflite_reader import read_tflite
    from edgeconv.verify.runner import TFLiteRunner

    print("| model | runtime | max LSB | op outputs that differ | first ones (share of their values) |")
    print("|---|---|---|---|---|")
    runner = TFLiteRunner(args.example.read_bytes())
    evaluation = np.load(REPO / "examples" / "digits" / "eval.npz")
    example = [{runner.inputs[n]: v for n, v in runner.raw_inputs({"image": evaluation["image"][k:k + 1]}).items()}
               for k in range(args.samples)]
    print("\n".join(rows("the example (digits CNN)", args.example, example)))
    mobilenet = build_model()
    spec = read_tflite(mobilenet).main
    index = spec.inputs[0]
    rng = np.random.default_rng(0)
    inputs = [{index: rng.integers(-128, 128, spec.tensors[index].shape).astype(np.int8)} for _ in range(args.samples)]
    print("\n".join(rows("MobileNetV2 1.0 224", mobilenet, inputs)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "scripts"))
    raise SystemExit(main())
