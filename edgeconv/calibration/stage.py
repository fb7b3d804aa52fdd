"""The data stage: a data section's samples drawn, checked and spooled, and the input ranges declared."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ..config import PipelineConfig
from ..errors import rel
from ..ir import TensorSpec
from . import SOURCES, resolve_source
from .config import CalibrationConfig, EvaluationConfig
from .samples import Progress, SampleSet, collect

log = logging.getLogger("edgeconv")


def collect_section(cfg: CalibrationConfig | EvaluationConfig, role: str, inputs: Sequence[TensorSpec],
             config: PipelineConfig, work: Path, progress: Progress | None) -> SampleSet:
    """Open a data section's source, then draw, check and spool its samples."""
    source = resolve_source(cfg)
    assert source is not None  # checked with the pipeline file
    where = rel(cfg.path) if cfg.path is not None else str(cfg.function)
    log.info("reading %s data %s (%s)", role, where, source)
    reader = SOURCES[source]().open(cfg, inputs, config.source.parent)
    labels = cfg.labels if isinstance(cfg, EvaluationConfig) else None
    return collect(reader, inputs, role=role, source=source, samples=cfg.samples, seed=cfg.seed, folder=work,
                   labels=labels, progress=progress)


def expected_ranges(config: PipelineConfig, inputs: Sequence[TensorSpec]) -> dict[str, tuple[float, float]]:
    """The declared input range per model input: calibration.expected_range, else what an image
    source's preprocessing maps pixels 0-255 to."""
    cal = config.calibration
    if cal is None:
        return {}
    out = {name: (float(lo), float(hi)) for name, (lo, hi) in cal.expected_range.items()}
    if cal.preprocess is not None and resolve_source(cal) == "images":
        from .sources.images import pick_input

        spec = pick_input(cal, inputs, "calibration")
        channels = 1 if cal.preprocess.color.value == "grayscale" else 3
        out.setdefault(spec.name, cal.preprocess.value_range(channels))
    return out
