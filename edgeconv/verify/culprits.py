"""Where the quantization error comes from, and which layers to keep in float.

The converter's worker measures every quantized op on the evaluation data (TF's
QuantizationDebugger runs each quantized op next to the same op in float, on the same
dequantized inputs): the error the op adds on its own (``rmse_per_scale``; plain
rounding gives about 0.29, and ``sqnr_db``, its output against the float op's), and
the share of the float op's output values its quantization erases to the zero level
(``erased``: a wide-range tensor crushes its small channels this way). Ops are ranked by
erased share, then by lowest SQNR. A model output's erased values are not counted in
the ranking (a softmax rightly rounds tiny probabilities to zero; the parity section
measures the outputs), only what an intermediate tensor loses is passed on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import report_model as rm
from ..ir import source_layers


def rank(layers: Sequence[Mapping[str, Any]], layer_names: Sequence[str],
         outputs: Sequence[str] = ()) -> list[rm.Culprit]:
    """Quantized ops, worst first, with the source layers they come from."""
    final = set(outputs)
    ranked = sorted(layers, key=lambda r: (-round(0.0 if r["tensor"] in final else r["erased"], 3),
                                           r["sqnr_db"] if r["sqnr_db"] is not None else float("inf")))
    where = [source_layers(r["tensor"], layer_names) for r in ranked]
    if len(ranked) > 1 and all(w == where[0] for w in where):
        # One name scope covers the whole graph (a TF1 model under its model name): it tells the ops
        # apart by nothing. Name each op by its own scope path below what they all share.
        where = distinct_scopes([r["tensor"] for r in ranked])
    return [{"rank": i + 1, "op": r["op"], "tensor": r["tensor"],
             "source_layers": w, "model_output": r["tensor"] in final,
             "erased": r["erased"], "sqnr_db": r["sqnr_db"], "rmse_per_scale": r["rmse_per_scale"],
             "scale": r["scale"]} for i, (r, w) in enumerate(zip(ranked, where))]


def distinct_scopes(tensors: Sequence[str]) -> list[list[str]]:
    """Each tensor's scope path (its first fused name, without the op's own last part) below the scopes
    every tensor shares; the whole name when nothing is left."""
    paths = [t.split(";")[0].split("/") for t in tensors]
    shared = 0
    while all(len(p) > shared + 1 for p in paths) and len({p[shared] for p in paths}) == 1:
        shared += 1
    return [["/".join(p[shared:-1]) or "/".join(p)] for p in paths]


def keep_float_pattern(tensor: str) -> str:
    return f"^{re.escape(tensor)}$"


def suggest(culprits: Sequence[Mapping[str, Any]], steps: int,
            trial: Callable[[list[str]], tuple[list[str], dict[str, Any]]]) -> rm.KeepFloatSuggestion:
    """Keep the worst ops in float, one more at a time, until ``trial`` reports no failed gate;
    then drop every op the passing set does not need (one trial each), so the set is minimal.

    ``trial(patterns)`` converts with those keep_float patterns and returns the failed gate
    reasons and what the step cost (accuracy, SQNR, size).
    """
    tried: list[dict[str, Any]] = []

    def attempt(kept: list[Mapping[str, Any]], why: str) -> bool:
        patterns = [keep_float_pattern(c["tensor"]) for c in kept]
        reasons, cost = trial(patterns)
        tried.append({"step": why, "keep_float": patterns,
                      "layers": sorted({layer for c in kept for layer in c["source_layers"]}),
                      "ops": [c["op"] for c in kept], "passes_gates": not reasons, "failed": reasons, **cost})
        return not reasons

    passing: list[Mapping[str, Any]] | None = None
    for k in range(1, min(steps, len(culprits)) + 1):
        if attempt(list(culprits[:k]), f"keep the {k} worst op(s) in float"):
            passing = list(culprits[:k])
            break
    if passing is None:
        return {"found": False, "keep_float": None, "layers": None, "steps": tried}
    for candidate in list(passing[:-1]):  # the last one added was needed: without it the gates failed
        smaller = [c for c in passing if c is not candidate]
        where = ", ".join(candidate["source_layers"]) or candidate["tensor"]
        if attempt(smaller, f"without {candidate['op']} {where}"):
            passing = smaller
    patterns = [keep_float_pattern(c["tensor"]) for c in passing]
    return {"found": True, "keep_float": patterns,
            "layers": sorted({layer for c in passing for layer in c["source_layers"]}), "steps": tried}
