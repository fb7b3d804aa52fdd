"""Calibration data: registered sources and the checks run before calibrating."""

from __future__ import annotations

from .sources import CalibrationSource, NpySource, NpzSource

SOURCES: dict[str, type[CalibrationSource]] = {cls.name: cls for cls in (NpzSource, NpySource)}

__all__ = ["SOURCES", "CalibrationSource"]
