"""Independent oracles: what real runtimes decide, to check target predictions against.

XNNPACK: load the model in ai-edge-litert with its default delegate; after allocation the
op list holds one DELEGATE node per partition. An original node is delegated when it
lies between a DELEGATE node's outputs and its inputs (walking producers backwards).

TFLM: the tflite-micro Python interpreter (reference kernels) either loads and runs the
model or refuses it; its log names the op that failed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np


def xnnpack_delegated(path: Path) -> list[tuple[int, str, bool]]:
    """(op index, op type, delegated by XNNPACK) for every op of the main subgraph."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    details = interpreter._get_ops_details()
    original = [d for d in details if d["op_name"] != "DELEGATE"]
    producer = {int(t): d["index"] for d in original for t in d["outputs"]}
    delegated: set[int] = set()
    for node in (d for d in details if d["op_name"] == "DELEGATE"):
        boundary = {int(t) for t in node["inputs"]}
        stack = [producer[int(t)] for t in node["outputs"] if int(t) in producer]
        while stack:
            index = stack.pop()
            if index in delegated:
                continue
            delegated.add(index)
            stack += [producer[int(t)] for t in details[index]["inputs"]
                      if int(t) >= 0 and int(t) not in boundary and int(t) in producer]
    return [(d["index"], d["op_name"], d["index"] in delegated) for d in original]


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
