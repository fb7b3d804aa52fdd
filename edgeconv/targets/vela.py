"""Compiler-backed targets: Arm Ethos-U placement and estimates from the real Vela compiler.

edgeconv does not guess what Vela does: it runs Vela (``edgeconv[vela]``) on the model
and reads what Vela decided. Ops Vela folds into NPU regions (``ethos-u`` custom ops)
are supported; ops it leaves as builtins run on the Cortex-M CPU (cpu_fallback), with
Vela's own reason. Its summary CSV gives the SRAM, flash, cycle and time estimates.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from ..converters.tflite_reader import OpInfo, TFLiteModel, read_tflite
from ..errors import EdgeconvError

if TYPE_CHECKING:
    from .checker import OpResult, TargetResult
    from .target import Target

INSTALL_HINT = "pip install 'edgeconv[vela]'"
_WARNING = re.compile(r"^Warning \(supported operators\) operator: (\S+), ofm: '(.*)'$")
_ESTIMATES = {  # summary CSV column -> report key
    "sram_memory_used": "sram_kib",
    "off_chip_flash_memory_used": "off_chip_flash_kib",
    "on_chip_flash_memory_used": "on_chip_flash_kib",
    "dram_memory_used": "dram_kib",
    "nn_macs": "macs",
    "cycles_npu": "cycles_npu",
    "cycles_total": "cycles_total",
    "inference_time": "inference_time_s",
    "inferences_per_second": "inferences_per_second",
}


def vela_available() -> bool:
    return importlib.util.find_spec("ethosu") is not None


def require_vela(target_name: str) -> None:
    if not vela_available():
        raise EdgeconvError(f"target {target_name} is checked by the Arm Vela compiler, which is not installed: "
                            f"{INSTALL_HINT}")


def _reasons(output: str) -> dict[str, list[str]]:
    """Vela's reason lines per output tensor name of each op it keeps on the CPU."""
    reasons: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        found = _WARNING.match(line.strip())
        if found:
            current = reasons.setdefault(found.group(2), [])
        elif current is not None and line.strip():
            current.append(line.strip().removeprefix("Reason: "))
        else:
            current = None
    return reasons


def _estimates(out_dir: Path) -> dict[str, float]:
    summaries = sorted(out_dir.glob("*_summary_*.csv"))
    if not summaries:
        return {}
    with summaries[0].open() as f:
        import csv

        row = next(csv.DictReader(f), {})
    # Nothing on the NPU: Vela's 0 cycles give 0 s per inference and NaN inferences per second (0/0). An
    # estimate that is not a number is left out (report.json is strict JSON; the other estimates stand).
    values = {key: float(row[column]) for column, key in _ESTIMATES.items() if row.get(column) not in (None, "")}
    return {key: value for key, value in values.items() if math.isfinite(value)}


def _key(op: OpInfo) -> tuple[str, ...]:
    """An op as Vela's rewritten model shows it: its type and the names of the tensors it writes, or for
    an op that writes none (ASSIGN_VARIABLE, CALL_ONCE), of those it reads. Vela renumbers ops."""
    names = [t.name for t in op.outputs] or ["<in>", *(t.name for t in op.inputs if t is not None)]
    return (op.label, *names)


def _vela_message(log: str) -> str:
    """The line of Vela's output that says why it failed (an error line, else the last line)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith(("error", "vela error")) or "Error:" in ln]
    text = (errors or lines or ["no output"])[-1]
    return text[:300]


def place_with_vela(model: TFLiteModel, target: Target) -> TargetResult:
    import subprocess
    import tempfile

    from .checker import OpResult, TargetResult, Violation
    from .cost import op_cost
    from .target import OpStatus

    compiler = target.compiler
    assert compiler is not None
    require_vela(target.name)
    with tempfile.TemporaryDirectory(prefix="edgeconv-vela-") as tmp:
        work = Path(tmp)
        (work / "model.tflite").write_bytes(model.data)
        args = ["model.tflite", "--accelerator-config", compiler.accelerator_config, "--output-dir", "out"]
        if compiler.system_config:
            args += ["--system-config", compiler.system_config]
        if compiler.memory_mode:
            args += ["--memory-mode", compiler.memory_mode]
        # -P: Vela's working folder is not a place to import from (only the model is in it, but -c would
        # put it first on the path).
        proc = subprocess.run([sys.executable, "-P", "-c", "import sys; from ethosu.vela.vela import main; "
                               "sys.exit(main(sys.argv[1:]))", *args], cwd=work, capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        compiled = work / "out" / "model_vela.tflite"
        if proc.returncode != 0 or not compiled.exists():
            # Vela's own failure on this model: the target has no verdict, the other targets still do.
            return TargetResult(target, (), error=f"Vela failed on the model (exit code {proc.returncode}): "
                                f"{_vela_message(log)}")
        on_cpu = Counter(_key(op) for op in read_tflite(compiled).ops if op.custom_code != "ethos-u")
        estimates = _estimates(work / "out")
    reasons = _reasons(log)
    rule = compiler.rule
    results: list[OpResult] = []
    for op in model.ops:
        violations: tuple[Violation, ...] = ()
        if on_cpu[_key(op)] > 0:
            on_cpu[_key(op)] -= 1
            detail = "; ".join(reasons.get(op.name, [])) or "left on the CPU by Vela"
            violations = (Violation(f"{target.name}.{op.type}.{rule.id}", rule.text, detail, rule.fix, rule.effect,
                                    target.sources.get(rule.source, rule.source)),)
        status = OpStatus.CPU_FALLBACK if violations else OpStatus.SUPPORTED
        results.append(OpResult(op, status, violations, op_cost(op)))
    return TargetResult(target, tuple(results), estimates=estimates)
