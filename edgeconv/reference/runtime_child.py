"""A runtime run in a process of its own (``python -P -m edgeconv.reference.runtime_child KIND FOLDER``): a
runtime that aborts on a model (TFLite Micro's int8 SOFTMAX on a scale it does not take) stops this process,
not the build. Reads FOLDER/model.tflite and FOLDER/inputs.npz (``s{k}/{tensor index}``), writes
FOLDER/tensors.npz (the same keys, every tensor the runtime exposes)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np


def main(kind: str, folder: Path) -> int:
    from ..converters.tflite_reader import parse_tflite
    from .drift import runtime_tensors

    data = (folder / "model.tflite").read_bytes()
    model = parse_tflite(data, "model.tflite")
    with np.load(folder / "inputs.npz", allow_pickle=False) as inputs:
        samples: dict[int, dict[int, np.ndarray]] = {}
        for key in inputs.files:
            k, index = key[1:].split("/")
            samples.setdefault(int(k), {})[int(index)] = inputs[key]
    out: dict[str, Any] = {}
    for k, raw in sorted(samples.items()):
        for index, value in runtime_tensors(kind, data, model, raw).items():
            out[f"s{k}/{index}"] = value
    np.savez(folder / "tensors.npz", **out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], Path(sys.argv[2])))
