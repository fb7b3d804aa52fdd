"""Targets: one data file per built-in target, the constraint kinds, the checker.

Built-in targets are the files in ``targets/data``; their names are the file names. Each loads from
its validated JSON twin in ``targets/compiled`` while the twin was made from the file's bytes as they are.
The pipeline's allowed target names come from this listing. A reference that is a
path to a ``.yaml`` file is a user's own target file, validated the same way.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..errors import ConfigError, allowed_list, did_you_mean
from .target import Target, load_target_file

DATA_DIR = Path(__file__).parent / "data"


def builtin_target_names() -> list[str]:
    # iterdir, not glob("*.yaml"): glob compiles its pattern to a regular expression on each call, 0.3 ms of
    # each `edgeconv check`
    return sorted(p.stem for p in DATA_DIR.iterdir() if p.suffix == ".yaml")


TARGET_FILE_SUFFIXES = (".yaml", ".yml")


def is_target_file(ref: str) -> bool:
    return ref.endswith(TARGET_FILE_SUFFIXES)


@functools.cache
def load_target(ref: str) -> Target:
    """Load a built-in target by name, or a target file by path (both validated the same way)."""
    if is_target_file(ref):
        return load_target_file(Path(ref))
    names = builtin_target_names()
    if ref not in names:
        raise ConfigError([f"unknown target {ref!r} (allowed: {allowed_list(names)}, or a path to a target "
                           f".yaml file){did_you_mean(ref, names)}"])
    from .compiled import load_compiled

    path = DATA_DIR / f"{ref}.yaml"
    return load_compiled(ref, path) or load_target_file(path, expected_name=ref)
