"""The gates in one place: the strict defaults, the limits in force for a build (the pipeline's own, else
the defaults, minus the default gates it turned off, with a note for each it loosened, naming its file and
line) and for ``edgeconv check`` (its command-line gates). The verdict applies them (edgeconv.verdict)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import rel
from .targets import load_target

if TYPE_CHECKING:
    from .config import GatesConfig, PipelineConfig


# What practitioners accept for INT8 post-training quantization (README "Default gates" says why):
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


@dataclasses.dataclass(frozen=True)
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
    max_arena_bytes: int | None = None
    max_flash_bytes: int | None = None
    notes: tuple[str, ...] = ()


def check_limits(gates: GatesConfig | None) -> Limits:
    """What ``edgeconv check`` (and :func:`edgeconv.check`) gates a .tflite on: the strict defaults (an
    accelerator target runs at least the default share of the MACs) and the gates given."""
    if gates is None:
        return Limits()
    return Limits(max_cpu_fallback_ops=dict(gates.max_cpu_fallback_ops),
                  min_supported_mac_share=dict(gates.min_supported_mac_share), fail_on_warnings=gates.fail_on_warnings)


def gate_limits(config: PipelineConfig) -> Limits:
    """The thresholds in force: the pipeline's, else the strict defaults, minus the default gates it turned
    off; a note for every default it loosened or turned off, with its line."""
    g = config.gates
    lines = config.gate_lines

    def where(key: str) -> str:
        return f"{rel(config.source)} line {lines[key]}" if key in lines else rel(config.source)

    notes: list[str] = []
    off = set(g.disable)
    notes += [f"default gate '{name}' disabled in {where('disable')} (gates.disable)" for name in g.disable]
    if not config.verify.parity and config.model.resolved_format().value != "tflite":
        notes.append(f"the agreement and accuracy gates are not checked: verify.parity is false in "
                     f"{where('verify.parity')}")

    def pick(key: str, gate: str, looser: Any) -> Any:
        value = getattr(g, key)
        if value is None:
            return None if gate in off else DEFAULTS[key]
        if looser(value, DEFAULTS[key]):
            notes.append(f"gates.{key} = {value:g} is looser than the default {DEFAULTS[key]:g} ({where(key)})")
        return value

    accelerators = {t.name for t in (load_target(name) for name in config.targets) if t.accelerator}
    for name, share in g.min_supported_mac_share.items():
        if name in accelerators and share < DEFAULTS["min_accelerator_mac_share"]:
            notes.append(f"gates.min_supported_mac_share.{name} = {share:g} is looser than the default "
                         f"{DEFAULTS['min_accelerator_mac_share']:g} for an accelerator "
                         f"({where('min_supported_mac_share')})")
    return Limits(
        max_accuracy_drop=pick("max_accuracy_drop", "accuracy", lambda v, d: v > d),
        min_top1_agreement=pick("min_top1_agreement", "agreement", lambda v, d: v < d),
        min_sqnr_db=pick("min_sqnr_db", "agreement", lambda v, d: v < d),
        min_cosine=g.min_cosine,
        calibration_findings_fail="calibration" not in off,
        calibration_warnings_fail=g.fail_on_calibration_warnings,
        min_accelerator_mac_share=None if "accelerator" in off else DEFAULTS["min_accelerator_mac_share"],
        max_cpu_fallback_ops=dict(g.max_cpu_fallback_ops), min_supported_mac_share=dict(g.min_supported_mac_share),
        fail_on_warnings=g.fail_on_warnings, max_arena_bytes=g.max_arena_bytes, max_flash_bytes=g.max_flash_bytes,
        notes=tuple(notes))
