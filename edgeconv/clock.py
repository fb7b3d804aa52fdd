"""Seconds per build stage, for the report and the console's last lines."""

from __future__ import annotations

import time

from . import cancel
from . import report_model as rm
from .calibration.samples import Progress


class Clock:
    """Seconds per build stage, for the report and the console's last lines; and the count-less
    stages' start and end for ``progress`` (a spinner on a terminal: ``total`` 0, ``done`` 0 then 1)."""

    def __init__(self, progress: Progress | None) -> None:
        self.start = self.last = time.perf_counter()
        self.stages: dict[str, float] = {}
        self.progress = progress
        self.label: str | None = None

    def begin(self, label: str) -> None:
        cancel.check()
        self._end()
        self.label = label
        if self.progress is not None:
            self.progress(label, 0, 0)

    def lap(self, stage: str) -> None:
        cancel.check()
        self._end()
        now = time.perf_counter()
        self.stages[stage] = self.stages.get(stage, 0.0) + now - self.last
        self.last = now

    def lap_then(self, stage: str, label: str) -> None:
        """:meth:`lap` for the stage that ended, then :meth:`begin` for the next one."""
        self.lap(stage)
        self.begin(label)

    def _end(self) -> None:
        if self.label is not None and self.progress is not None:
            self.progress(self.label, 1, 0)
        self.label = None

    def carry(self, stage: str, seconds: float) -> None:
        """A stage that ran before this clock started (the build as configured and the repair search, before
        the rebuild): counted in the stages and the total."""
        self.stages[stage] = self.stages.get(stage, 0.0) + seconds
        self.start -= seconds

    def to_json(self) -> rm.Timings:
        return {"stages_s": {k: round(v, 2) for k, v in self.stages.items()},
                "total_s": round(self.last - self.start, 2)}
