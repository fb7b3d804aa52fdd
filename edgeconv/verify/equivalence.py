"""The equivalence proof: the cleaned graph computes what the model in inference mode computes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import report_model as rm
from .._log import get_logger
from .._record import record
from ..calibration.samples import SampleSet
from ..clock import Clock
from ..config import VerifyConfig
from ..converters.model import LoadedModel
from ..errors import ModelError
from ..ir import FrozenGraph
from ..passes import GraphPass, PassResult

log = get_logger(__name__)


def equivalence(reference: Any, graph: FrozenGraph, fn: Any, calib: SampleSet, batch_size: int, samples: int,
                 tolerance: float) -> rm.Equivalence:
    """Outputs of the model in inference mode vs the cleaned graph (``fn``, its concrete function) on the first
    calibration samples."""
    from ..converters.tf_graph import run_graph

    steps = list(calib.batches(batch_size, limit=math.ceil(samples / batch_size) * batch_size))
    worst: dict[str, float] = {o.name: 0.0 for o in graph.outputs}
    for feeds in steps:
        want = reference(feeds)
        got = run_graph(graph, feeds, fn)
        for name in worst:
            diff = float(np.max(np.abs(want[name].astype(np.float64) - got[name].astype(np.float64))))
            worst[name] = max(worst[name], diff if math.isfinite(diff) else math.inf)
    return proof(worst, tolerance, len(steps) * batch_size, calib.role)


def proof(worst: dict[str, float], tolerance: float, samples: int, role: str) -> rm.Equivalence:
    """The equivalence section: the largest difference of each output, and whether the largest of them all is
    within ``verify.pass_tolerance`` (at it passes)."""
    max_diff = max(worst.values(), default=0.0)
    return {"samples": samples, "tolerance": tolerance, "max_abs_diff": max_diff,
            "per_output": worst, "passed": max_diff <= tolerance,
            "inputs": "calibration samples" if role == "calibration" else
            "seeded random inputs (the mode needs no calibration data and the pipeline gives none)"}


def inference_reference(loaded: LoadedModel, passes: Sequence[PassResult], feeds: dict[str, np.ndarray]) -> Any:
    """The model in inference mode, as the reference the cleaned graph must match.

    A layer that forces training behaviour makes ``model(x, training=False)`` random;
    when a pass replaced such dropout/noise layers by their inference identity, the
    reference is the model with exactly those layers at rate 0. A model that is still
    random is refused, naming the layers.
    """
    if _deterministic(loaded.reference, feeds):
        return loaded.reference
    roles = {layer.name: layer for layer in loaded.graph.layers if layer.training_only}
    forced = sorted({name for p in passes for r in p.rewrites for name in r.layers if name in roles})
    if forced:
        reference = loaded.reference_for(forced)
        if _deterministic(reference, feeds):
            return reference
    named = ", ".join(f"{roles[n].class_name} {n!r}" for n in forced) or "its layers"
    raise ModelError(f"the model gives a different output on every call even with training=False ({named}); "
                     "a layer forces training behaviour or calls a random op. Fix: call such layers with "
                     "training=False (do not pass training=True inside call()), or remove the random op")


def _deterministic(run: Any, feeds: dict[str, np.ndarray]) -> bool:
    first, second = run(feeds), run(feeds)
    return all(np.array_equal(first[k], second[k]) for k in first)


@record
class Cleaned:
    """The graph the passes left, what they changed, the model in inference mode as their reference and the
    proof that they match."""

    graph: FrozenGraph
    passes: list[PassResult]
    reference: Any
    equivalence: rm.Equivalence


def clean_and_prove(passes: Sequence[GraphPass], verify: VerifyConfig, batch: int, loaded: LoadedModel,
                    calib: SampleSet, clock: Clock) -> tuple[Cleaned, Any]:
    """Run every configured pass, then compare the cleaned graph with the model in inference mode on the
    first calibration samples (``verify.pass_samples``, within ``verify.pass_tolerance``), ``batch`` at a
    time. Also the graph's
    concrete function, run here and saved by the converter: the caller drops it once the converter has it
    (it holds the weights once more)."""
    from ..converters.tf_graph import concrete_function

    graph = loaded.graph
    results: list[PassResult] = []
    clock.begin("running the passes")
    for p in passes:
        log.info("pass %s", p.name)
        graph, result = p.apply(graph)
        results.append(result)
    log.info("comparing the cleaned graph with the model in inference mode")
    reference = inference_reference(loaded, results, next(calib.batches(batch)))
    graph_fn = concrete_function(graph)
    proof = equivalence(reference, graph, graph_fn, calib, batch, verify.pass_samples, verify.pass_tolerance)
    return Cleaned(graph, results, reference, proof), graph_fn
