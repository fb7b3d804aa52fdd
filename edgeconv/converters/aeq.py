"""Quantization of a float ``.tflite`` with AI Edge Quantizer (``quantization.engine: ai-edge-quantizer``).

What the TFLite converter's quantizer cannot give: int16 activations for some ops of an int8 model
(``int16_ops``: AI Edge Quantizer puts a QUANTIZE op where an int8 tensor meets an int16 op), and
activation ranges that clip rare outliers (``range_percentile``). Runs in the converter worker, on the
float model the worker converts, calibrated on the same samples as the converter would be.

The ranges are edgeconv's, not AI Edge Quantizer's own calibration (a moving average of each sample's
min and max, whose result depends on the order of the samples): the min and max over every calibration
sample, as the TFLite converter calibrates, or with ``range_percentile`` the percentiles of all the values
each op output takes on them. AI Edge Quantizer 0.10 (``ai-edge-quantizer`` on PyPI).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

BINS = 4096  # histogram bins per tensor for range_percentile (between the tensor's min and max)


class PatternError(Exception):
    """A pattern of quantization.keep_float or int16_ops matches no op output of the model."""


def quantize(float_model: bytes, batches: Callable[[], Iterable[Mapping[str, np.ndarray]]], *, mode: str,
             per_channel: bool, int16_ops: Sequence[str], percentile: float | None,
             data_key: str | None = None) -> tuple[bytes, list[str]]:
    """The quantized model, and the op output names given int16 activations. ``batches()`` yields the
    calibration batches (model input name -> array) each time it is called; ``data_key`` names them: the
    statistics measured on them are kept (:func:`_statistics`) for the next model quantized from the same
    float model and data (repair trials differ in their int16 ops, modes and percentiles, not in these)."""
    from ai_edge_quantizer import qtyping, quantizer

    from .tflite_reader import parse_tflite

    ops = parse_tflite(float_model, "float model").ops
    int16 = matching("int16_ops", int16_ops, sorted({t.name for op in ops for t in op.outputs}))
    q = quantizer.Quantizer(float_model)
    granularity = qtyping.QuantGranularity.CHANNELWISE if per_channel else qtyping.QuantGranularity.TENSORWISE
    q.add_static_config(".*", "*", activation_num_bits=16 if mode == "int16x8" else 8, weight_num_bits=8,
                        weight_granularity=granularity)
    # AI Edge Quantizer matches its regexes against an op's scope: its output names, each followed by ";".
    scopes = sorted({"".join(f"{t.name};" for t in op.outputs) for op in ops
                     if any(t.name in int16 for t in op.outputs)})
    for scope in scopes:
        q.add_static_config(f"^{re.escape(scope)}$", "*", activation_num_bits=16, weight_num_bits=8,
                            weight_granularity=granularity)
    ranges = _ranges(float_model, batches, percentile, data_key)
    qsvs = {name: {"min": np.full(shape, lo, np.float32), "max": np.full(shape, hi, np.float32)}
            for name, (shape, lo, hi) in ranges.items()}
    result = q.quantize(qsvs, enable_progress_bar=False, enable_progress_report=False)
    return bytes(result.quantized_model), int16


def matching(key: str, patterns: Sequence[str], names: Sequence[str]) -> list[str]:
    """The names the patterns match (``re.search``, as keep_float); a pattern that matches none is an error."""
    found: set[str] = set()
    for pattern in patterns:
        matched = {n for n in names if re.search(pattern, n)}
        if not matched:
            raise PatternError(f"quantization.{key}: {pattern!r} matches no op output of the model (e.g. "
                              f"{', '.join(sorted(names)[:5])})")
        found |= matched
    return sorted(found)


@dataclasses.dataclass
class _Statistics:
    """What the calibration batches give each float activation of a model: its QSV shape, its min and max,
    and (once a percentile is asked for) its histogram of BINS bins between them."""

    tensors: dict[int, tuple[str, tuple[int, ...]]]
    low: dict[int, float]
    high: dict[int, float]
    counts: dict[int, np.ndarray] | None = None


_MEASURED: dict[str, _Statistics] = {}  # per float model and calibration data
_KEEP = 2  # statistics kept (the build's and one other calibration's); one needed again is measured again


def _statistics(model: bytes, batches: Callable[[], Iterable[Mapping[str, np.ndarray]]], histograms: bool,
                data_key: str | None) -> _Statistics:
    """The statistics of ``model`` on ``batches``, measured once per model and ``data_key``: the min and
    max in one run over the batches, the histograms (with ``histograms``) in a second run the first time
    they are asked for. The same batches give the same statistics, so a kept one gives the same bytes."""
    import hashlib

    from ..verify.runner import TFLiteRunner

    key = hashlib.sha256(model + data_key.encode()).hexdigest() if data_key is not None else None
    stats = _MEASURED.get(key) if key is not None else None
    runner: TFLiteRunner | None = None

    def each_run(tensors: Mapping[int, Any]) -> Iterable[dict[int, np.ndarray]]:
        nonlocal runner
        runner = runner or TFLiteRunner(model, keep_tensors=True)
        for batch in batches():  # batches of the model's batch size, as the converter's calibration takes them
            runner.run(batch)
            yield {i: runner.interpreter.get_tensor(i) for i in tensors}

    if stats is None:
        from .tflite_reader import parse_tflite

        graph = parse_tflite(model, "float model").main
        activations = (*(graph.tensors[i] for i in graph.inputs), *(o for op in graph.ops for o in op.outputs))
        tensors = {t.index: (t.name, (1,) * max(len(t.shape), 1)) for t in activations
                   if t.is_float and not t.constant}
        stats = _Statistics(tensors, {i: np.inf for i in tensors}, {i: -np.inf for i in tensors})
        for values in each_run(tensors):
            for i, v in values.items():
                if v.size:
                    stats.low[i], stats.high[i] = min(stats.low[i], float(v.min())), max(stats.high[i], float(v.max()))
        if key is not None:
            _MEASURED[key] = stats
            while len(_MEASURED) > _KEEP:
                del _MEASURED[next(iter(_MEASURED))]
    if histograms and stats.counts is None:
        counts = {i: np.zeros(BINS, np.int64) for i in stats.tensors if stats.high[i] > stats.low[i]}
        for values in each_run(counts):
            for i in counts:
                counts[i] += np.histogram(values[i], BINS, (stats.low[i], stats.high[i]))[0]
        stats.counts = counts
    return stats


def _ranges(model: bytes, batches: Callable[[], Iterable[Mapping[str, np.ndarray]]], percentile: float | None,
            data_key: str | None = None) -> dict[str, tuple[tuple[int, ...], float, float]]:
    """Per float activation of the main graph (its inputs and every op output): its QSV shape (one value
    per dimension, as AI Edge Quantizer keeps them) and its range on the calibration batches."""
    stats = _statistics(model, batches, percentile is not None, data_key)
    low, high = dict(stats.low), dict(stats.high)
    if percentile is not None:
        assert stats.counts is not None
        below = (100.0 - percentile) / 100.0
        for i, c in stats.counts.items():
            edges = np.linspace(low[i], high[i], BINS + 1)
            cumulative = np.cumsum(c) / c.sum()
            # The lower edge of the first bin past the low percentile, the upper edge of the bin that reaches
            # the high one: at most `100 - percentile` % of the values clip on each side.
            low[i] = float(edges[int(np.searchsorted(cumulative, below, side="right"))])
            high[i] = float(edges[int(np.searchsorted(cumulative, 1.0 - below, side="left")) + 1])
    return {name: (shape, low[i], high[i]) for i, (name, shape) in stats.tensors.items() if np.isfinite(low[i])}
