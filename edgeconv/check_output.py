"""What ``edgeconv check`` prints: a checked .tflite, or an ONNX model's op listing, as text, Markdown
or JSON. The lines only; the command line prints them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import rel
from .results import CheckResult

if TYPE_CHECKING:
    from . import report_model as rm


def check_lines(path: Path, result: CheckResult, fmt: str, *, quiet: bool = False) -> list[str]:
    """A checked .tflite: each target's verdict (per op unless one model-wide cause explains every op, as
    the diagnosis says), then the gate's reasons; ``fmt`` is ``text``, ``md`` or ``json``."""
    data = result.to_json()
    if fmt == "json":  # the report's targets section; with --reference-inputs, beside the runtimes' drift
        return [json_text(data if result.drift is None else {"targets": data, "runtime_drift": result.drift})]
    from . import markdown as md
    from .report import drift_lines, target_lines, targets_markdown
    from .targets.diagnosis import diagnose

    found = diagnose(result.model)
    if fmt == "md":
        said = [f"**Model:** {md.text(found.sentence)}", ""] if found is not None else []
        table = targets_markdown(data, result.gate["checks"])
        from .report import drift_markdown

        return ["\n".join([f"# edgeconv check: {md.text(rel(path))}", "", *said, *table, "",
                           *drift_markdown(result.drift)])]
    lines = [f"model: {found.sentence}"] if found is not None and not quiet else []
    brief = (found is not None and found.explains_every_op) or quiet
    for t in data:
        lines += target_lines(t, result.gate["checks"], per_op=not brief)
    if brief and not quiet:
        lines.append("(every op fails an integer target for that reason; per-op details: --format md or json)")
    return lines + drift_lines(result.drift) + [f"gate: {reason}" for reason in result.gate["reasons"]]


ONE_LINE = ("ops", "blocking_ops")  # a target's lists of ops: an op a line


def json_text(value: Any, pad: str = "") -> str:
    """``value`` as ``json.dumps(value, indent=2)`` lays it out, except that each item of a list of ops
    (:data:`ONE_LINE`) is one line: an op per line reads (and greps) better in a CI log than 15 lines an op,
    and the one-line items are written by json's C encoder (the indented encoder is pure Python: for
    MobileNetV2's 65 ops against two targets, 1.3 ms against 0.5 ms; scripts/bench_check.py)."""
    if isinstance(value, dict) and value:
        inner = pad + "  "
        items = (f"{inner}{_key(key)}: " + (_one_per_line(item, inner) if key in ONE_LINE and isinstance(item, list)
                                                   else json_text(item, inner)) for key, item in value.items())
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        inner = pad + "  "
        return "[\n" + ",\n".join(inner + json_text(item, inner) for item in value) + f"\n{pad}]"
    return json.dumps(value)


def _key(key: Any) -> str:
    """A key as json writes it: always a string (``1`` is ``"1"``, ``True`` is ``"true"``)."""
    return json.dumps(key if isinstance(key, str) else json.dumps(key))


def _one_per_line(items: list[Any], pad: str) -> str:
    if not items:
        return "[]"
    inner = pad + "  "
    return "[\n" + ",\n".join(inner + json.dumps(item) for item in items) + f"\n{pad}]"


def onnx_warnings(summary: rm.OnnxSummary) -> list[str]:
    """What in an ONNX model runs only somewhere special, or nowhere."""
    return ([f"custom domain {d}: runs only where that domain's ops are implemented"
             for d in summary["custom_domains"]]
            + [f"op {op} is not defined by ONNX (a converter left it; no runtime knows it)"
               for op in summary["unknown_ops"]])


def onnx_lines(path: Path, summary: rm.OnnxSummary, warnings: Sequence[str], fmt: str) -> list[str]:
    """An ONNX model's opsets, op counts and warnings (no target rules for ONNX yet)."""
    from . import markdown as md
    from .report import onnx_model_markdown

    data: dict[str, Any] = {**summary, "warnings": list(warnings)}
    if fmt == "json":
        return [json.dumps(data, indent=2)]
    if fmt == "md":
        return ["\n".join([f"# edgeconv check: {md.text(rel(path))}", "", *onnx_model_markdown(data)])]
    opsets = ", ".join(f"{k} {v}" for k, v in summary["opsets"].items())
    return [f"{rel(path)}: ONNX, opset {opsets}, {sum(summary['ops'].values())} ops",
            *(f"  {op} x{count}" for op, count in summary["ops"].items()), *(f"warning: {w}" for w in warnings)]
