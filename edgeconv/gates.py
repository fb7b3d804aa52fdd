"""The gates in one place: the strict defaults, the limits in force for a build (the pipeline's own, else
the defaults, minus the default gates it turned off, with a note for each it loosened, naming its file and
line) and for ``edgeconv check`` (its command-line gates). The verdict applies them (edgeconv.verdict)."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._record import record
from .errors import rel
from .targets import load_target

if TYPE_CHECKING:
    from .config import GatesConfig, PipelineConfig


# What practitioners accept for INT8 post-training quantization (docs/PIPELINE.md "Default gates" says why):
# healthy INT8 CNNs lose well under a point of accuracy and keep 25-45 dB SQNR at their outputs
# (the shipped example: 0.00 points, 43 dB); a broken calibration costs tens of points and lands in
# single-digit dB. The limits leave room for sampling noise on a few hundred evaluation samples.
DEFAULTS: Mapping[str, float] = {
    "max_accuracy_drop": 0.03,  # 3 percentage points of task accuracy (labels)
    "min_top1_agreement": 0.90,  # classifier outputs: top-1 class of the built model = the float model's
    "min_sqnr_db": 20.0,  # every output: signal 10x the quantization noise in amplitude
    "min_accelerator_mac_share": 0.5,  # accelerator targets: at least half the MACs on the accelerator
}
DEFAULT_GATES = ("accuracy", "agreement", "calibration", "accelerator")


@record
class Loosened:
    """A default gate the pipeline loosened or turned off: the key that does it, the file and line that set
    it (``line`` None when the key is not in the file, e.g. a pipeline built in code), and the sentence the
    report and the console say."""

    key: str  # the pipeline key: gates.min_sqnr_db, gates.disable, verify.parity, ...
    file: Path
    line: int | None
    sentence: str

    def __str__(self) -> str:
        return self.sentence


@record
class Limits:
    """The thresholds in force for one build: the pipeline's own, else the defaults, minus the default
    gates it turned off. ``notes`` say every default the pipeline loosened or turned off, and where."""

    max_accuracy_drop: float | None = DEFAULTS["max_accuracy_drop"]
    min_top1_agreement: float | None = DEFAULTS["min_top1_agreement"]
    min_sqnr_db: float | None = DEFAULTS["min_sqnr_db"]
    min_cosine: float | None = None
    calibration_findings_fail: bool = True  # the severe calibration findings fail the build
    calibration_warnings_fail: bool = False  # every calibration finding fails (gates.fail_on_calibration_warnings)
    min_accelerator_mac_share: float | None = DEFAULTS["min_accelerator_mac_share"]
    max_cpu_fallback_ops: Mapping[str, int] = dataclasses.field(default_factory=dict)
    min_supported_mac_share: Mapping[str, float] = dataclasses.field(default_factory=dict)
    fail_on_warnings: bool = False
    uncertain_fails: bool = True  # an op an accelerator target is uncertain about fails (gates.uncertain)
    max_arena_bytes: int | None = None
    max_flash_bytes: int | None = None
    max_runtime_drift_lsb: int | None = None
    notes: tuple[Loosened, ...] = ()
    # min_sqnr_db, min_top1_agreement, min_cosine given per model output: {gate: {output: limit}}; the outputs
    # not named have the gate's own field
    per_output: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)

    def for_output(self, gate: str, output: str) -> float | None:
        """The limit of ``gate`` (min_sqnr_db, min_top1_agreement, min_cosine) for model output ``output``."""
        named = self.per_output.get(gate, {})
        return named[output] if output in named else typing.cast(float | None, getattr(self, gate))

    @property
    def any_parity_gate(self) -> bool:
        return any(v is not None for v in (self.max_accuracy_drop, self.min_top1_agreement, self.min_sqnr_db,
                                           self.min_cosine)) or any(self.per_output.values())


def check_limits(gates: GatesConfig | None) -> Limits:
    """What ``edgeconv check`` (and :func:`edgeconv.check`) gates a .tflite on: the strict defaults (an
    accelerator target runs at least the default share of the MACs) and the gates given."""
    if gates is None:
        return Limits()
    return Limits(max_cpu_fallback_ops=dict(gates.max_cpu_fallback_ops),
                  min_supported_mac_share=dict(gates.min_supported_mac_share), fail_on_warnings=gates.fail_on_warnings,
                  uncertain_fails=gates.uncertain.value == "fail")


def gate_limits(config: PipelineConfig) -> Limits:
    """The thresholds in force: the pipeline's, else the strict defaults, minus the default gates it turned
    off; a note for every default it loosened or turned off, with its line."""
    g = config.gates
    notes: list[Loosened] = []

    def loosened(key: str, line_key: str, sentence: Any) -> None:
        """A note for ``key``, whose line the pipeline recorded under ``line_key``; ``sentence(where)``."""
        line = config.gate_lines.get(line_key)
        where = f"{rel(config.source)} line {line}" if line is not None else rel(config.source)
        notes.append(Loosened(key, config.source, line, sentence(where)))

    off = set(g.disable)
    for name in g.disable:
        loosened("gates.disable", "disable", lambda w, n=name: f"default gate '{n}' disabled in {w} (gates.disable)")
    if not config.verify.parity and config.model.resolved_format().value != "tflite":
        loosened("verify.parity", "verify.parity",
                 lambda w: f"the agreement and accuracy gates are not checked: verify.parity is false in {w}")

    per_output: dict[str, Mapping[str, float]] = {}

    def pick(key: str, gate: str, looser: Any) -> Any:
        value = getattr(g, key)
        default = None if gate in off or key not in DEFAULTS else DEFAULTS[key]
        if isinstance(value, Mapping):  # per output: the outputs not named keep the default
            per_output[key] = dict(value)
            for name, v in value.items():
                if key in DEFAULTS and looser(v, DEFAULTS[key]):
                    loosened(f"gates.{key}.{name}", key, lambda w, n=name, v=v: f"gates.{key}.{n} = {v:g} is looser "
                             f"than the default {DEFAULTS[key]:g} for output {n!r} ({w})")
            return default
        if value is None:
            return default
        if key in DEFAULTS and looser(value, DEFAULTS[key]):
            loosened(f"gates.{key}", key,
                     lambda w: f"gates.{key} = {value:g} is looser than the default {DEFAULTS[key]:g} ({w})")
        return value

    if g.uncertain.value != "fail":
        loosened("gates.uncertain", "uncertain", lambda w: f"gates.uncertain = {g.uncertain.value} is looser than "
                 f"the default fail: an op an accelerator may not run passes ({w})")
    accelerators = {t.name for t in (load_target(name) for name in config.targets) if t.accelerator}
    for name, share in g.min_supported_mac_share.items():
        if name in accelerators and share < DEFAULTS["min_accelerator_mac_share"]:
            loosened(f"gates.min_supported_mac_share.{name}", "min_supported_mac_share",
                     lambda w, n=name, v=share: f"gates.min_supported_mac_share.{n} = {v:g} is looser than the "
                     f"default {DEFAULTS['min_accelerator_mac_share']:g} for an accelerator ({w})")
    return Limits(
        max_accuracy_drop=pick("max_accuracy_drop", "accuracy", lambda v, d: v > d),
        min_top1_agreement=pick("min_top1_agreement", "agreement", lambda v, d: v < d),
        min_sqnr_db=pick("min_sqnr_db", "agreement", lambda v, d: v < d),
        min_cosine=pick("min_cosine", "agreement", lambda v, d: False),
        calibration_findings_fail="calibration" not in off,
        calibration_warnings_fail=g.fail_on_calibration_warnings,
        min_accelerator_mac_share=None if "accelerator" in off else DEFAULTS["min_accelerator_mac_share"],
        max_cpu_fallback_ops=dict(g.max_cpu_fallback_ops), min_supported_mac_share=dict(g.min_supported_mac_share),
        fail_on_warnings=g.fail_on_warnings, uncertain_fails=g.uncertain.value == "fail",
        max_arena_bytes=g.max_arena_bytes, max_flash_bytes=g.max_flash_bytes,
        max_runtime_drift_lsb=g.max_runtime_drift_lsb,
        notes=tuple(notes), per_output=per_output)
