"""How far a runtime's numbers are from the reference's (``edgeconv.reference.run``), op by op.

Both compute the same integer model; a runtime's optimized kernels may round differently (TFLite's
optimized kernels, XNNPACK, TFLite Micro). Each op output the runtime exposes is compared with the
reference's: the largest difference in LSBs (steps of the tensor's quantization) and the share of elements
that differ. The golden vectors of a build are cross-checked the same way against TFLite's reference kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import report_model as rm
from ..converters.tflite_reader import TFLiteModel


@dataclasses.dataclass
class OpDrift:
    """One op output, over every sample compared."""

    op: int
    type: str
    tensor: str
    max_lsb: int = 0
    differ: int = 0
    elements: int = 0

    def add(self, want: np.ndarray, got: np.ndarray) -> None:
        diff = np.abs(want.astype(np.int64) - np.asarray(got).astype(np.int64))
        self.max_lsb = max(self.max_lsb, int(diff.max(initial=0)))
        self.differ += int(np.count_nonzero(diff))
        self.elements += int(diff.size)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "type": self.type, "tensor": self.tensor, "max_lsb": self.max_lsb,
                "differ": round(self.differ / self.elements, 6) if self.elements else 0.0}


def compare(model: TFLiteModel, runs: Iterable[tuple[Mapping[str, np.ndarray], Mapping[int, np.ndarray]]]
            ) -> list[OpDrift]:
    """Per op output (in op order) that the runtime exposed in every run: the reference's tensors (by name)
    against the runtime's (by tensor index). Float tensors (a float model's, QUANTIZE's input) are not
    compared."""
    found: dict[int, OpDrift] = {}
    for reference, got in runs:
        for op in model.main.ops:
            for t in op.outputs:
                if t is None or t.is_float or t.index not in got or t.name not in reference:
                    continue
                entry = found.setdefault(t.index, OpDrift(op.index, op.type, t.name))
                entry.add(reference[t.name], got[t.index])
    return sorted(found.values(), key=lambda d: d.op)


def first_difference(drifts: Sequence[OpDrift]) -> OpDrift | None:
    return next((d for d in drifts if d.max_lsb), None)


# The runtimes here that run a target's kernels, and what each exposes.
RUNTIMES: dict[str, str] = {
    "builtin": "LiteRT's optimized builtin kernels, no delegate (every op output visible)",
    "xnnpack": "LiteRT with XNNPACK, its default delegate (only the model's outputs are visible: the ops inside the "
               "delegate are fused)",
    "tflm": "the TFLite Micro interpreter of the tflite-micro package (its portable kernels, not CMSIS-NN's; every "
            "op output visible)",
}
TARGET_RUNTIMES: dict[str, str] = {"generic-int8": "builtin", "arm-neon": "xnnpack", "tflm-cmsis-nn": "tflm"}


def runtime_tensors(kind: str, data: bytes, model: TFLiteModel,
                    raw_inputs: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Run ``data`` on runtime ``kind`` with the inputs as the model takes them (by input tensor index); the
    tensors it exposes, by index."""
    if kind == "tflm":
        from tflite_micro.python.tflite_micro import runtime

        micro = runtime.Interpreter.from_bytes(data, intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors)
        for k, index in enumerate(model.main.inputs):
            micro.set_input(raw_inputs[index], k)
        micro.invoke()
        out = {}
        for op in model.main.ops:
            for t in op.outputs:
                if t is not None:
                    found = micro.GetTensor(t.index, 0)
                    out[t.index] = np.array(found["tensor_data"]).reshape(found["shape"])
        return out
    import warnings

    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from ..verify.runner import native_chatter_to_log

    every = kind == "builtin"
    resolver = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if every else OpResolverType.AUTO
    with native_chatter_to_log(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors")
        interpreter = Interpreter(model_content=data, experimental_op_resolver_type=resolver,
                                  experimental_preserve_all_tensors=every)
        interpreter.allocate_tensors()
    for index, value in raw_inputs.items():
        interpreter.set_tensor(index, value)
    interpreter.invoke()
    shown = [t.index for op in model.main.ops for t in op.outputs if t is not None] if every else model.main.outputs
    return {i: np.array(interpreter.get_tensor(i)) for i in shown}


class RuntimeStopped(Exception):
    """A runtime refused or aborted on the model (in its own process: the build goes on)."""


RUNTIME_SECONDS = 600  # a runtime's process, all samples


def in_a_process(kind: str, data: bytes, samples: Sequence[Mapping[int, np.ndarray]]) -> list[dict[int, np.ndarray]]:
    """:func:`runtime_tensors` for every sample, in a process of its own (edgeconv.reference.runtime_child): a
    native abort stops that process only."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edgeconv-drift-") as scratch:
        folder = Path(scratch)
        (folder / "model.tflite").write_bytes(data)
        arrays: dict[str, Any] = {f"s{k}/{i}": v for k, s in enumerate(samples) for i, v in s.items()}
        np.savez(folder / "inputs.npz", **arrays)
        try:
            done = subprocess.run([sys.executable, "-P", "-m", "edgeconv.reference.runtime_child", kind,
                                   str(folder)], capture_output=True, text=True, timeout=RUNTIME_SECONDS, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeStopped(f"the {kind} runtime took more than {RUNTIME_SECONDS} s") from None
        if done.returncode != 0:
            said = [line for line in done.stderr.strip().splitlines() if line.strip()]
            why = said[-1][:200] if said else "no message"
            raise RuntimeStopped(f"the {kind} runtime stopped on this model (exit {done.returncode}): {why}")
        got: list[dict[int, np.ndarray]] = [{} for _ in samples]
        with np.load(folder / "tensors.npz", allow_pickle=False) as tensors:
            for key in tensors.files:
                k, index = key[1:].split("/")
                got[int(k)][int(index)] = tensors[key]
    return got


def measure(data: bytes, model: TFLiteModel, samples: Sequence[Mapping[int, np.ndarray]],
            runtimes: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each runtime against the reference on ``samples`` (inputs as the model takes them, by tensor index):
    per op output it exposes, the largest difference in LSBs and the share that differ; an error (a runtime
    that cannot run the model, an op the reference does not have) is said instead."""
    from . import ReferenceError, run

    names = {i: model.main.tensors[i].name for i in model.main.inputs}
    try:
        references = [run(model, {names[i]: v for i, v in s.items()}).tensors for s in samples]
    except ReferenceError as exc:
        return {kind: {"runtime": RUNTIMES[kind], "error": f"the reference cannot compute it: {exc}"}
                for kind in runtimes}
    out: dict[str, dict[str, Any]] = {}
    for kind in runtimes:
        try:
            got = in_a_process(kind, data, samples)
        except RuntimeStopped as exc:  # a runtime that refuses or aborts on the model is a finding, said
            out[kind] = {"runtime": RUNTIMES[kind], "error": str(exc)}
            continue
        drifts = compare(model, list(zip(references, got)))
        out[kind] = {"runtime": RUNTIMES[kind], "samples": len(samples), "tensors_compared": len(drifts),
                     "max_lsb": max((d.max_lsb for d in drifts), default=0),
                     "ops": [d.to_json() for d in drifts if d.max_lsb]}
    return out


READ_SAMPLES = 8  # samples of a --reference-inputs .npz compared


def measure_inputs(data: bytes, model: TFLiteModel, path: Path, targets: Sequence[Any]) -> rm.RuntimeDrift:
    """``edgeconv check --reference-inputs``: the runtimes of ``targets`` against the reference on the first
    READ_SAMPLES samples of the .npz (float arrays quantized as the model's inputs are)."""
    from .trace import read_samples

    samples = read_samples(path, model, READ_SAMPLES)
    keys = {model.main.tensors[i].name: i for i in model.main.inputs}
    raw = [{keys[name]: v for name, v in s.items()} for s in samples]
    return {"samples": len(raw), "data": "reference-inputs", "runtimes": measure_targets(data, model, raw, targets)}


def measure_targets(data: bytes, model: TFLiteModel, samples: Sequence[Mapping[int, np.ndarray]],
                    targets: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """:func:`measure` for the runtimes of ``targets`` that have one here, each with the target it runs."""
    kinds = {TARGET_RUNTIMES[t.name]: t.name for t in targets if t.name in TARGET_RUNTIMES}
    measured = measure(data, model, samples, list(kinds)) if kinds and samples else {}
    for kind, found in measured.items():
        found["target"] = kinds[kind]
    return measured
