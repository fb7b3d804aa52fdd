"""A build from the outside: :func:`build` checks the pipeline, output folder, targets and baseline
(:func:`prepare`) before any heavy work, serves an unchanged build from the cache (its files verified,
written whole, its targets checked again on the served .tflite), and otherwise runs the stages
(:func:`.pipeline.run`).

A cached rebuild is this module and what it imports: the calibration, the passes, the converter and the
verification stages are not imported (:mod:`.pipeline`, the build's table of contents, imports them when
the build runs), and neither is NumPy (``tests/integration/test_cache.py`` holds a served build to that).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from . import output
from ._log import get_logger
from .cache import BuildCache
from .config import ModelFormat, PipelineConfig, load_pipeline
from .converters.tflite_reader import parse_tflite
from .diff import load_report
from .errors import rel
from .results import BuildResult
from .targets import is_target_file, load_target
from .targets.checker import check_model
from .targets.target import Target

if TYPE_CHECKING:
    from . import report_model as rm
    from .calibration.samples import Progress

log = get_logger(__name__)


def build(pipeline: str | Path | PipelineConfig, *, out: str | Path | None = None,
          progress: Progress | None = None, suggest_keep_float: bool = False,
          cache: BuildCache | None = None, baseline: str | Path | None = None, repair: bool = False) -> BuildResult:
    """Run the pipeline: load, clean, prove, quantize, check, and write the output folder.

    Raises EdgeconvError for user mistakes (nothing is written), InternalError for
    failures of the toolchain. A build whose targets fail still writes its
    artifacts; ``BuildResult.passed`` is False. ``progress(stage, done, total)`` is
    called while data is read and while the converter calibrates; a stage without a count
    (loading, passes, converting, parity, ...) reports ``total`` 0, with ``done`` 0 when it
    starts and 1 when it ends. With ``cache``, an
    unchanged rebuild writes the cached artifacts and report instead (``BuildResult.cached``).
    With ``baseline`` (an earlier report.json or its folder), the report says what changed and the
    regression gates (gates.max_size_growth, ...) can fail the build. ``repair`` turns on the search for a
    quantization that passes the agreement gates (as ``repair.enabled``).
    """
    config, out_dir, targets, base = setup(pipeline, out, baseline, repair, suggest_keep_float)
    if config.model.resolved_format() is ModelFormat.TFLITE:
        from .pipeline import check_existing

        return check_existing(config, out_dir, targets, base)
    key = None
    if cache is not None:
        key, found = served(config, out_dir, targets, base, cache, suggest_keep_float)
        if found is not None:
            return found
    from .pipeline import run  # the stages: TensorFlow, the calibration, the passes, the verification

    result = run(config, out_dir, targets, progress, suggest_keep_float, base)
    if cache is not None and key is not None:
        cache.store(key, out_dir)
    return result


def from_cache(pipeline: str | Path | PipelineConfig, *, cache: BuildCache, out: str | Path | None = None,
               suggest_keep_float: bool = False, baseline: str | Path | None = None,
               repair: bool = False) -> BuildResult | None:
    """What :func:`build` writes and returns when it needs no TensorFlow: an unchanged build served from
    ``cache``, or a .tflite model's checks; None when the build must run."""
    config, out_dir, targets, base = setup(pipeline, out, baseline, repair, suggest_keep_float)
    if config.model.resolved_format() is ModelFormat.TFLITE:
        from .pipeline import check_existing

        return check_existing(config, out_dir, targets, base)
    return served(config, out_dir, targets, base, cache, suggest_keep_float)[1]


def cache_key(pipeline: str | Path | PipelineConfig, *, cache: BuildCache, out: str | Path | None = None,
              suggest_keep_float: bool = False, baseline: str | Path | None = None,
              repair: bool = False) -> str | None:
    """The key :func:`build` looks the pipeline up by in ``cache`` (None: not cacheable, or a .tflite)."""
    config, out_dir, _, base = setup(pipeline, out, baseline, repair, suggest_keep_float)
    if config.model.resolved_format() is ModelFormat.TFLITE:
        return None
    return cache.key(config, out_dir, suggest_keep_float, base)[0]


def setup(pipeline: str | Path | PipelineConfig, out: str | Path | None, baseline: str | Path | None, repair: bool,
          suggest_keep_float: bool) -> tuple[PipelineConfig, Path, list[Target], rm.Report | None]:
    """The pipeline (loaded, with the repair search on when ``repair``), its output folder, targets and
    baseline, each checked before any heavy work."""
    config = pipeline if isinstance(pipeline, PipelineConfig) else load_pipeline(pipeline)
    if repair and not config.repair.enabled:
        from .verify.stage import with_repair

        config = with_repair(config)
    out_dir, targets, base = prepare(config, out, baseline)
    if suggest_keep_float and config.model.resolved_format() is not ModelFormat.TFLITE:
        from .verify.stage import can_suggest

        can_suggest(config, targets)
    return config, out_dir, targets, base


def served(config: PipelineConfig, out_dir: Path, targets: list[Target], base: rm.Report | None, cache: BuildCache,
           suggest_keep_float: bool) -> tuple[str | None, BuildResult | None]:
    """The build's cache key (None: not cacheable), and the build served from the cache when it holds it."""
    key, why = cache.key(config, out_dir, suggest_keep_float, base)
    if key is None:
        log.info("cache: not cacheable: %s", why)
        return None, None
    files = cache.load(key)
    return key, (_from_cache(config, out_dir, targets, key, files) if files is not None else None)


def prepare(config: PipelineConfig, out: str | Path | None,
            baseline: str | Path | None) -> tuple[Path, list[Target], rm.Report | None]:
    """Before any heavy work: the output folder (not a link, holding no input, one edgeconv may replace), the
    targets and the baseline report, each refused with a clear error."""
    if out is not None or config.output.dir is None:  # output.dir itself was checked with the pipeline
        output.check_not_a_link(Path(out) if out is not None else config.output_dir)
    out_dir = Path(out).resolve() if out is not None else config.output_dir
    output.recover(out_dir)
    _output_holds_no_input(config, out_dir)
    output.check_writable(out_dir)
    targets: list[Target] = [load_target(name) for name in config.targets]
    base = load_report(baseline) if baseline is not None else None
    if base is None and config.gates.regression.any:
        log.warning("gates: %s compare with a baseline; without --baseline they are not checked",
                    ", ".join(config.gates.regression.names))
    return out_dir, targets, base


def _output_holds_no_input(config: PipelineConfig, out_dir: Path) -> None:
    """The pipeline file, the model, the data and the target files must stay outside the output folder."""
    inputs = [("pipeline file", config.source), ("model", config.model.path)]
    for role, section in (("calibration data", config.calibration), ("evaluation data", config.evaluation)):
        if section is not None and section.path is not None:
            inputs.append((role, section.path))
    inputs += [("target file", Path(t)) for t in config.targets if is_target_file(t)]
    output.check_holds_no_input(out_dir, inputs)


def _from_cache(config: PipelineConfig, out_dir: Path, targets: list[Target], key: str,
                files: dict[str, bytes]) -> BuildResult | None:
    """Write a cached build's files; the target results are re-read from its .tflite (no TensorFlow).
    The entry's report must describe the .tflite it comes with before anything touches the output."""
    import hashlib

    name = f"{config.build_name}.tflite"
    try:
        cached_report = json.loads(files["report.json"])
        described = cached_report["artifacts"]["tflite"]["sha256"]
    except (KeyError, ValueError, TypeError):
        described = None
    if name not in files or described != hashlib.sha256(files[name]).hexdigest():
        log.warning("cache: entry %s does not match its own report; building", key[:12])
        return None
    output.commit(out_dir, files)
    log.info("cache: unchanged since build %s; wrote %s from the cache", key[:12], rel(out_dir))
    model = parse_tflite(files[name], name)
    results = tuple(check_model(model, t) for t in targets)
    return BuildResult(config, out_dir, out_dir / name, cached_report, results, cached=True)
