"""What ``edgeconv reference`` writes: every tensor (``tensors.npz``) and the trace of each op as JSON and
Markdown (``trace.json``, ``trace.md``), and how it reads the inputs it is given."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import markdown as md
from ..converters.tflite_reader import TFLiteModel
from ..errors import DataError, rel
from . import Computed, input_keys
from .fixedpoint import round_half_away_array


def read_inputs(path: Path, model: TFLiteModel, sample: int) -> dict[str, np.ndarray]:
    """Sample ``sample`` of each model input from an .npz (arrays keyed by input tensor name or signature key,
    first axis the samples; no pickled objects). A float array for an integer input is quantized with the
    input's scale and zero point, as an application feeding the model would."""
    return _sample(_load(path), path, model, sample)


def read_samples(path: Path, model: TFLiteModel, most: int) -> list[dict[str, np.ndarray]]:
    """The first ``most`` samples (whole model batches) of the .npz, as :func:`read_inputs` reads each."""
    arrays = _load(path)
    first = model.main.tensors[model.main.inputs[0]].shape[0] or 1
    count = min((len(a) for a in arrays.values()), default=0) // first
    return [_sample(arrays, path, model, k * first) for k in range(min(count, most))]


def _load(path: Path) -> dict[str, np.ndarray]:
    from ..inputs import MAX_MODEL_BYTES, read_bytes

    raw = read_bytes(path, MAX_MODEL_BYTES, DataError, what="inputs .npz")
    try:
        return dict(np.load(io.BytesIO(raw), allow_pickle=False))
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{rel(path)}: not a readable .npz ({exc})") from None


def _sample(arrays: Mapping[str, np.ndarray], path: Path, model: TFLiteModel, sample: int) -> dict[str, np.ndarray]:
    graph = model.main
    keys = input_keys(model)
    feeds: dict[str, np.ndarray] = {}
    for name, array in arrays.items():
        if name not in keys:
            raise DataError(f"{rel(path)}: array {name!r} is not a model input (inputs: "
                            f"{', '.join(graph.tensors[i].name for i in graph.inputs)})")
        t = graph.tensors[keys[name]]
        if array.ndim != len(t.shape) or tuple(array.shape[1:]) != tuple(t.shape[1:]):
            raise DataError(f"{rel(path)}: array {name!r} has shape {list(array.shape)}, expected samples of "
                            f"{list(t.shape[1:])} (first axis: the samples)")
        if not 0 <= sample < array.shape[0]:
            raise DataError(f"{rel(path)}: sample {sample} of {array.shape[0]} in {name!r}")
        x = array[sample:sample + t.shape[0]]
        if x.dtype.kind == "f" and t.dtype.value in ("int8", "uint8", "int16"):
            q = t.quantization
            assert q is not None
            info = np.iinfo(t.dtype.value)
            quantized = round_half_away_array(x.astype(np.float32) / np.float32(q.scale[0])) + q.zero_point[0]
            x = np.clip(quantized, info.min, info.max)
        feeds[t.name] = x.astype(t.dtype.value)
    return feeds


def _json_safe(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def trace_json(model: TFLiteModel, computed: Computed) -> dict[str, Any]:
    """Per op: its index, type, output tensors (shape, dtype, scale, zero point) and the trace."""
    by_name = {t.name: t for t in model.main.tensors}

    def tensor(name: str) -> dict[str, Any]:
        t = by_name[name]
        q = t.quantization
        return {"name": name, "shape": list(t.shape), "dtype": t.dtype.value,
                "scale": list(q.scale) if q is not None else None,
                "zero_point": list(q.zero_point) if q is not None else None}

    return {"model": model.path, "sha256": model.sha256,
            "ops": [{"index": s.index, "op": s.op, "outputs": [tensor(n) for n in s.outputs],
                     "trace": _json_safe(s.trace)} for s in computed.steps]}


def trace_markdown(data: Mapping[str, Any]) -> str:
    lines = [f"# Reference run of {md.text(data['model'])}", "",
             "| # | op | output | GEMM M x N x K | accumulator range | values clamped (activation or type range) |",
             "|---|---|---|---|---|---|"]
    for op in data["ops"]:
        t = op["trace"]
        gemm = " x ".join(str(v) for v in t["gemm"]) if "gemm" in t else "-"
        acc = f"[{t['accumulator'][0]:,}, {t['accumulator'][1]:,}]" if "accumulator" in t else "-"
        out = op["outputs"][0] if op["outputs"] else {"name": "-", "shape": []}
        lines.append(f"| {op['index']} | {md.text(op['op'])} | {md.code(out['name'], cell=True)} {out['shape']} | "
                     f"{gemm} | {acc} | "
                     f"{t.get('clamped', 0)} |")
    return "\n".join(lines) + "\n"


def files(model: TFLiteModel, computed: Computed) -> dict[str, bytes]:
    """The output folder's files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:  # what np.savez writes: one .npy per tensor, keyed by name
        for name, value in computed.tensors.items():
            npy = io.BytesIO()
            np.save(npy, value, allow_pickle=False)
            archive.writestr(f"{name}.npy", npy.getvalue())
    data = trace_json(model, computed)
    return {"tensors.npz": buffer.getvalue(), "trace.json": (json.dumps(data, indent=2) + "\n").encode(),
            "trace.md": trace_markdown(data).encode()}
