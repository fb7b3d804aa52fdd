"""Independent oracles: what real runtimes decide, to check target predictions against.

XNNPACK: load the model in ai-edge-litert with its default delegate; after allocation the
op list holds one DELEGATE node per partition. An original node is delegated when it
lies between a DELEGATE node's outputs and its inputs (walking producers backwards), or
when it reads or writes a tensor the arena gave no memory (only a delegate's kernel uses it).

TFLM: the tflite-micro Python interpreter (reference kernels) either loads and runs the
model or refuses it; its log names the op that failed.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np


def xnnpack_delegated(path: Path) -> list[tuple[int, str, bool]]:
    """(op index, op type, delegated by XNNPACK) for every op of the main subgraph.

    Raises RuntimeError when the interpreter cannot load the model with its default delegate."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    details = interpreter._get_ops_details()
    original = [d for d in details if d["op_name"] != "DELEGATE"]
    producer = {int(t): d["index"] for d in original for t in d["outputs"]}
    delegated: set[int] = set()
    boundary_out: set[int] = set()
    for node in (d for d in details if d["op_name"] == "DELEGATE"):
        boundary = {int(t) for t in node["inputs"]}
        boundary_out |= {int(t) for t in node["outputs"]}
        stack = [producer[int(t)] for t in node["outputs"] if int(t) in producer]
        while stack:
            index = stack.pop()
            if index in delegated:
                continue
            delegated.add(index)
            stack += [producer[int(t)] for t in details[index]["inputs"]
                      if int(t) >= 0 and int(t) not in boundary and int(t) in producer]
    # A tensor a delegated op writes that no DELEGATE node outputs never leaves the delegate: every op
    # that reads it is inside too (ops without outputs, such as ASSIGN_VARIABLE, are found this way).
    # Resource handles (VAR_HANDLE outputs) are shared by ops inside and outside a partition: not counted.
    # The walk above cannot see an op whose only reader has no outputs (STRIDED_SLICE -> ASSIGN_VARIABLE)
    # when its input also leaves the delegate; the arena can: after allocate_tensors() every tensor an op
    # of the execution plan reads or writes has its memory, and a tensor only a delegate's kernel uses has
    # none (static, non-empty shapes only: a dynamic tensor gets its memory when its op runs, an empty one
    # never).
    from edgeconv.converters.tflite_reader import TensorType, read_tflite

    tensors = read_tflite(path).main.tensors
    resources = {t.index for t in tensors if t.dtype is TensorType.RESOURCE}
    static = {t.index for t in tensors if -1 not in (t.shape_signature or t.shape) and 0 not in t.shape
              and t.dtype not in (TensorType.RESOURCE, TensorType.VARIANT, TensorType.STRING)}
    written = {int(t) for d in original for t in d["outputs"]}
    inside = {int(t) for t in written & static if _has_no_memory(interpreter, int(t))}
    delegated |= {d["index"] for d in original
                  if any(int(t) in inside for t in (*d["outputs"], *d["inputs"]))}
    grown = True
    while grown:
        internal = {int(t) for i in delegated for t in details[i]["outputs"]} - boundary_out - resources
        more = {d["index"] for d in original if d["index"] not in delegated
                and any(int(t) in internal for t in d["inputs"])}
        grown = bool(more)
        delegated |= more
    return [(d["index"], d["op_name"], d["index"] in delegated) for d in original]


def _has_no_memory(interpreter: Any, tensor: int) -> bool:
    """The tensor has no memory in the interpreter's arena (only a delegate's kernel uses it)."""
    try:
        interpreter.tensor(tensor)()
    except ValueError as exc:
        if "null" in str(exc):
            return True
        raise
    return False


_TFLM_PROBE = """
import sys, numpy as np
from tflite_micro.python.tflite_micro import runtime
# The default arena (10x the file size) is too small for real networks; the arena is the
# firmware's choice, not a TFLM limit, so give the oracle plenty.
it = runtime.Interpreter.from_bytes(open(sys.argv[1], 'rb').read(), arena_size=256 * 1024 * 1024)
i = 0
while True:
    try:
        d = it.get_input_details(i)
    except Exception:
        break
    dt = d['dtype']
    x = np.zeros(d['shape'], dt)
    it.set_input(x, i)
    i += 1
it.invoke()
print('TFLM-OK')
"""


def tflm_runs(path: Path) -> tuple[bool, str]:
    """Whether TFLM (reference kernels) loads and runs the model, and its log when it does not.
    Runs in a child process: the interpreter prints its errors from C++."""
    proc = subprocess.run([sys.executable, "-c", _TFLM_PROBE, str(path)], capture_output=True, text=True,
                          timeout=120)
    log = proc.stdout + proc.stderr
    return proc.returncode == 0 and "TFLM-OK" in proc.stdout, log


_TFLM_MANY = """
import sys, numpy as np
from tflite_micro.python.tflite_micro import runtime
for i, path in enumerate(sys.argv[1:]):
    print(f"@@BEGIN {i}", flush=True)
    try:
        it = runtime.Interpreter.from_bytes(open(path, 'rb').read(), arena_size=256 * 1024 * 1024)
        k = 0
        while True:
            try:
                d = it.get_input_details(k)
            except Exception:
                break
            it.set_input(np.zeros(d['shape'], d['dtype']), k)
            k += 1
        it.invoke()
        print(f"@@RESULT {i} OK", flush=True)
    except Exception as exc:
        print(exc, flush=True)
        print(f"@@RESULT {i} FAIL", flush=True)
"""


def tflm_runs_many(paths: list[Path]) -> dict[Path, tuple[bool, str]]:
    """tflm_runs for many models in few processes: one runs them in turn; a model that crashes the
    interpreter (an abort) ends that process, is recorded as refused, and the next one starts after it."""
    out: dict[Path, tuple[bool, str]] = {}
    start = 0
    while start < len(paths):
        batch = paths[start:]
        proc = subprocess.run([sys.executable, "-c", _TFLM_MANY, *map(str, batch)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=600)
        parts = re.split(r"^@@BEGIN (\d+)\n", proc.stdout, flags=re.M)
        last = -1
        for k in range(1, len(parts) - 1, 2):
            i, text = int(parts[k]), parts[k + 1]
            found = re.search(rf"^@@RESULT {i} (OK|FAIL)$", text, re.M)
            out[batch[i]] = (found is not None and found.group(1) == "OK", text)
            last = i
            if found is None:  # the interpreter took the process down with this model
                break
        start += max(last + 1, 1)
    return out


def tflm_failed_op(log: str) -> str | None:
    """The op TFLM names in its refusal, if any."""
    for pattern in (r"Didn't find op for builtin opcode '(\w+)'", r"Node (\w+) \(number \d+\) failed to",
                    r"Failed to get registration from op code (\w+)"):
        found = re.search(pattern, log)
        if found:
            return found.group(1)
    return None


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: type) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale + zero_point), info.min, info.max).astype(dtype)


def compare_arm_neon(path: Path) -> dict[str, object]:
    """edgeconv's arm-neon prediction next to what XNNPACK does, op by op (main subgraph).

    A model the interpreter cannot load must have an unsupported op; otherwise an op is predicted
    right when "supported" <=> delegated and nothing that runs is called unsupported."""
    from edgeconv.converters.tflite_reader import read_tflite
    from edgeconv.targets import load_target
    from edgeconv.targets.checker import check_model
    from edgeconv.targets.target import OpStatus

    result = check_model(read_tflite(path), load_target("arm-neon"))
    main = [r for r in result.ops if r.op.subgraph == 0]
    unsupported = [r for r in main if r.status is OpStatus.UNSUPPORTED]
    try:
        actual = xnnpack_delegated(path)
    except (RuntimeError, ValueError) as exc:
        return {"loads": False, "error": str(exc).splitlines()[0][:200], "ops": len(main),
                "false_supported": [] if unsupported else ["model does not load"],
                "false_unsupported": [], "exact": bool(unsupported)}
    delegated = {i: d for i, _, d in actual}
    false_supported = [f"#{r.op.index} {r.op.label}" for r in main
                       if r.status is OpStatus.SUPPORTED and not delegated.get(r.op.index, False)]
    false_unsupported = [f"#{r.op.index} {r.op.label}" for r in unsupported]
    missed = [f"#{r.op.index} {r.op.label}" for r in main
              if r.status is not OpStatus.SUPPORTED and delegated.get(r.op.index, False)]
    return {"loads": True, "ops": len(main), "false_supported": false_supported,
            "false_unsupported": false_unsupported, "not_supported_but_delegated": missed,
            "exact": not (false_supported or false_unsupported or missed)}


def compare_tflm(path: Path) -> dict[str, object]:
    """edgeconv's tflm-cmsis-nn prediction next to the tflite-micro interpreter: runs <=> nothing unsupported."""
    from edgeconv.converters.tflite_reader import read_tflite
    from edgeconv.targets import load_target
    from edgeconv.targets.checker import check_model
    from edgeconv.targets.target import OpStatus

    runs, log = _corpus_tflm().get(path) or tflm_runs(path)
    result = check_model(read_tflite(path), load_target("tflm-cmsis-nn"))
    unsupported = sorted({r.op.label for r in result.ops if r.status is OpStatus.UNSUPPORTED})
    named = None if runs else tflm_failed_op(log)
    return {"runs": runs, "named": named, "predicted_unsupported": unsupported,
            "false_supported": [] if runs or unsupported else [f"TFLM refuses ({named or _last_line(log)})"],
            "false_unsupported": unsupported if runs else [],
            "exact": runs == (not unsupported) and (runs or named is None or named in unsupported
                                                    or any(u.split(":")[0] == named for u in unsupported))}


def _last_line(log: str) -> str:
    lines = [ln for ln in log.splitlines() if ln.strip()]
    return lines[-1][:160] if lines else "no log"


_DATA = Path(__file__).resolve().parent / "data"
# The differential corpus: single-op models, probe models of the patterns real runtimes decided, the
# small fixtures, third-party models from packages, and the Edge TPU oracles' input models.
CORPUS = sorted(
    [*(_DATA / "ops").glob("*.tflite"), *(_DATA / "probes").glob("*.tflite"), *_DATA.glob("*.tflite"),
     *(_DATA / "thirdparty").glob("*.tflite"),
     *(p for p in (_DATA / "oracles").rglob("*.tflite")
       if not p.name.endswith("_edgetpu.tflite") and p.name != "model_invoking_error.tflite")],
    key=lambda p: p.name)


@functools.cache
def _corpus_tflm() -> dict[Path, tuple[bool, str]]:
    """The tflite-micro interpreter on the whole corpus, once."""
    return tflm_runs_many(CORPUS)


def known_differences() -> dict[tuple[str, str], list[str]]:
    """(model file name, target) -> the ops edgeconv and the real tool disagree on, with a reason on file."""
    import yaml

    entries = yaml.safe_load((_DATA / "known_differences.yaml").read_text()) or []
    return {(e["model"], e["target"]): sorted(e["ops"]) for e in entries}
