"""Targets: one data file per built-in target, the constraint kinds, the checker.

Built-in targets are the files in ``targets/data``; their names are the file names.
The pipeline's allowed target names come from this listing.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..errors import ConfigError, allowed_list, did_you_mean
from .target import Target, load_target_file

DATA_DIR = Path(__file__).parent / "data"


def builtin_target_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.yaml"))


@functools.cache
def load_target(name: str) -> Target:
    """Load a built-in target by name (validated like a user's target file)."""
    names = builtin_target_names()
    if name not in names:
        raise ConfigError([f"unknown target {name!r} (allowed: {allowed_list(names)}){did_you_mean(name, names)}"])
    return load_target_file(DATA_DIR / f"{name}.yaml", expected_name=name)
