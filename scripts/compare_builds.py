"""Build the same pipelines with this tree and with an earlier commit, and compare what they write.

    python scripts/compare_builds.py --base REF [--work DIR] [--jobs 2]

For a change that must not change behaviour (a refactoring): every .tflite, C array, golden vector,
ONNX model and overlay must be byte-identical, and report.json equal once its timings and creation time
are removed (report.md without its time line). The pipelines: the shipped example, the example with
every output and every built-in target, the real Keras 2 .h5 (fer), the Keras 2 SavedModel, a TF1
frozen graph with a training switch, a Keras model with Dropout and labels (parity, culprits), and every
.tflite under tests/data (the check-only path: op fixtures, probes, third-party models). Both trees run
``edgeconv build --no-cache`` over all of them in one command each (``-j``), with the same environment.
Exit 0 when everything matches; the differences are listed otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGETS = "[generic-int8, arm-neon, edgetpu, tflm-cmsis-nn, ethos-u55-128, ethos-u85-256]"


def _pipeline(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"version: 1\nname: {name}\n{body}output:\n  dir: build/{name}\n" if "output:" not in body
                    else f"version: 1\nname: {name}\n{body}")
    return path


def _keras_dropout(folder: Path) -> None:
    import keras
    import numpy as np

    keras.utils.set_random_seed(5)
    inp = keras.Input((7,), name="feat")
    x = keras.layers.Dense(11, activation="relu")(inp)
    x = keras.layers.Dropout(0.3)(x)
    out = keras.layers.Dense(4, activation="softmax", name="probs")(x)
    model = keras.Model(inp, out)
    model.save(folder / "dropout.keras")
    rng = np.random.default_rng(1)
    np.savez(folder / "dropout-cal.npz", feat=rng.normal(size=(64, 7)).astype(np.float32))
    feats = rng.normal(size=(96, 7)).astype(np.float32)
    np.savez(folder / "dropout-eval.npz", feat=feats, label=model.predict(feats, verbose=0).argmax(1))


def make_inputs(folder: Path) -> list[Path]:
    """The models, data and pipelines both trees build."""
    import numpy as np

    shutil.copytree(ROOT / "examples", folder / "examples")
    shutil.copytree(ROOT / "tests" / "data", folder / "data")
    example = (ROOT / "pipeline.yaml").read_text().split("output:")[0].replace("name: digits\n", "")
    example = example.replace("version: 1\n", "")
    paths = [_pipeline(folder, "digits", example)]
    paths.append(_pipeline(folder, "digits-all", example.split("targets:")[0] + f"targets: {TARGETS}\n"
                           "output:\n  dir: build/digits-all\n  onnx: {opset: 17}\n  c_array: {language: cc}\n"
                           "  op_resolver: true\n  golden: {samples: 2, intermediates: true}\n"))
    rng = np.random.default_rng(7)
    np.savez(folder / "fer-cal.npz", input_1=rng.uniform(-1, 1, (24, 64, 64, 1)).astype(np.float32))
    paths.append(_pipeline(folder, "fer", "model: {path: data/fer/emotion_model.hdf5}\n"
                           "calibration: {path: fer-cal.npz, samples: 24, min_samples: 16}\n"
                           f"targets: {TARGETS}\n"))
    np.savez(folder / "k2-cal.npz", feat=rng.normal(size=(32, 6)).astype(np.float32))
    paths.append(_pipeline(folder, "keras2-savedmodel", "model: {path: data/keras2_savedmodel}\n"
                           "calibration: {path: k2-cal.npz, samples: 32}\n"))
    subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "tf1_graph.py"), str(folder / "tf1.pb")],
                   check=True, capture_output=True)
    np.savez(folder / "tf1-cal.npz", image=rng.normal(size=(32, 6, 5, 3)).astype(np.float32))
    paths.append(_pipeline(folder, "tf1-graph", "model: {path: tf1.pb, bind: {is_training: false}}\n"
                           "calibration: {path: tf1-cal.npz, samples: 32}\n"))
    _keras_dropout(folder)
    paths.append(_pipeline(folder, "keras-dropout", "model: {path: dropout.keras}\n"
                           "calibration: {path: dropout-cal.npz, samples: 64}\n"
                           "evaluation: {path: dropout-eval.npz, labels: label}\n"
                           f"targets: {TARGETS}\n"))
    for i, tflite in enumerate(sorted((folder / "data").rglob("*.tflite"))):
        name = f"tflite-{i:03d}-{tflite.stem.replace('.', '-')}"
        paths.append(_pipeline(folder, name, f"model: {{path: {tflite.relative_to(folder)}}}\n"
                               f"targets: {TARGETS}\n"))
    return paths


def build(tree: Path, folder: Path, paths: list[Path], jobs: int) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "EDGECONV_NO_CACHE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "edgeconv", "build", "-q", "-j", str(jobs),
                           *(p.name for p in paths)], cwd=folder, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout + done.stderr


def _report(raw: bytes) -> Any:
    data = json.loads(raw)
    data.pop("created", None)
    data.pop("timings", None)
    if isinstance(data.get("repair"), dict):
        data["repair"].pop("seconds", None)
    return data


def _markdown(raw: bytes) -> list[str]:
    return [line for line in raw.decode().splitlines()
            if not line.startswith(("Time:", "time:", "Created", "- created", "**Created"))
            and " s (total " not in line and "| total |" not in line]


def _marker(raw: bytes) -> Any:
    def drop(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: drop(v) for k, v in value.items() if not k.startswith("report.")}
        return value
    return drop(json.loads(raw))


def _said(log: str) -> dict[str, list[str]]:
    """Per pipeline, what the build printed: its result line (without the time) and the lines under it."""
    out: dict[str, list[str]] = {}
    current: list[str] = []
    for line in log.splitlines():
        if line.endswith(")") or ".yaml: " in line:
            name, _, rest = line.partition(".yaml: ")
            if rest:
                current = out.setdefault(name, [rest.split(" in ")[0]])
                continue
        if line.startswith("  "):
            current.append(line.replace(str(Path.home()), "~").split("edgeconv-crash-")[0])
    return out


def compare(old: Path, new: Path) -> list[str]:
    """What differs between two output folders."""
    problems = []
    names = sorted({p.relative_to(old).as_posix() for p in old.rglob("*") if p.is_file()}
                   | {p.relative_to(new).as_posix() for p in new.rglob("*") if p.is_file()})
    for name in names:
        a, b = old / name, new / name
        if not a.exists() or not b.exists():
            problems.append(f"{name}: only in {'the new build' if b.exists() else 'the base build'}")
            continue
        x, y = a.read_bytes(), b.read_bytes()
        if name.endswith("report.json"):
            same = _report(x) == _report(y)
        elif name.endswith("report.md"):
            same = _markdown(x) == _markdown(y)
        elif name.endswith(".edgeconv-output"):  # the marker: the files with their hashes (reports: above)
            same = _marker(x) == _marker(y)
        else:
            same = x == y
        if not same:
            problems.append(f"{name}: differs")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the commit to compare with (e.g. HEAD~5)")
    parser.add_argument("--work", type=Path, help="folder for the inputs and both builds (default: a temporary one)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="edgeconv-compare-"))
    base_tree = work / "base-tree"
    base_tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base, "edgeconv"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base_tree)], input=archive, check=True)
    inputs = work / "inputs"
    inputs.mkdir()
    paths = make_inputs(inputs)
    outputs = {}
    for label, tree in (("base", base_tree), ("new", ROOT)):
        seconds, said = build(tree, inputs, paths, args.jobs)
        print(f"{label}: {len(paths)} pipelines built in {seconds:.0f} s")
        outputs[label] = work / f"build-{label}"
        shutil.move(inputs / "build", outputs[label])
        (work / f"{label}.log").write_text(said)
    failed = 0
    said = {label: _said((work / f"{label}.log").read_text()) for label in outputs}
    for path in paths:
        name = path.stem
        old, new = outputs["base"] / name, outputs["new"] / name
        if not old.exists() and not new.exists():
            same = said["base"].get(name) == said["new"].get(name)
            print(f"{name}: {'same' if same else 'DIFFERENT'} (no output: {' '.join(said['new'].get(name, ['?']))})")
            failed += not same
            continue
        problems = compare(old, new) if old.exists() and new.exists() else ["written by one tree only"]
        files = sum(1 for p in new.rglob("*") if p.is_file()) if new.exists() else 0
        print(f"{name}: {'same' if not problems else 'DIFFERENT'} ({files} files)")
        for p in problems:
            print(f"    {p}")
        failed += bool(problems)
    print(f"{len(paths) - failed} of {len(paths)} pipelines build the same files; work folder {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
