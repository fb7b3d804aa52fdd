"""Calibration data: registered sources, the checks run before calibrating, and the
seeded, hashed sample set fed to the converter (streamed, never held in memory)."""

from __future__ import annotations

from .sources import SOURCES, Reader, Source, resolve_source

__all__ = ["SOURCES", "Reader", "Source", "resolve_source"]
