"""What ``build()`` and ``check()`` return: the verdict with everything it was made from."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ._record import record
from .converters.tflite_reader import TFLiteModel
from .exit_codes import Exit, of_gate
from .report_targets import targets_json
from .targets.checker import TargetResult

if TYPE_CHECKING:
    from . import report_model as rm
    from .config import PipelineConfig


@record
class BuildResult:
    config: PipelineConfig
    output_dir: Path
    tflite_path: Path
    report: rm.Report
    targets: tuple[TargetResult, ...]
    cached: bool = False  # written from the build cache (the report is the cached build's)

    @property
    def passed(self) -> bool:
        return bool(self.report["gate"]["verdict"] == "pass")

    @property
    def exit_code(self) -> Exit:
        """What ``edgeconv build`` exits with for this build: the verdict's code (edgeconv.exit_codes)."""
        return of_gate(self.report["gate"])


@record
class CheckResult:
    model: TFLiteModel
    targets: tuple[TargetResult, ...]
    gate: rm.Gate
    drift: rm.RuntimeDrift | None = None  # --reference-inputs: each target's runtime against the reference

    @property
    def passed(self) -> bool:
        return bool(self.gate["verdict"] == "pass")

    @property
    def exit_code(self) -> Exit:
        """What ``edgeconv check`` exits with for this model: the verdict's code (edgeconv.exit_codes)."""
        return of_gate(self.gate)

    def to_json(self) -> list[rm.TargetVerdict]:
        """The report's ``targets`` section for this model."""
        return targets_json(self.targets)
