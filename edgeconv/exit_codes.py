"""The exit codes: one table for the whole project.

The command line returns them, the Action and the CI outputs name them, the verdict decides between
``OK`` and ``GATE``: every place that needs a code or its word takes it from here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any


class Exit(enum.IntEnum):
    OK = 0  # built (or checked), every target and gate passes
    GATE = 1  # built, but a check of the verdict fails
    USER = 2  # usage, config, model or data error: nothing written
    INTERNAL = 3  # a bug: traceback in a crash log
    INTERRUPTED = 130  # Ctrl-C
    TERMINATED = 143  # SIGTERM (what CI sends when it cancels a job)


WORDS: dict[int, str] = {Exit.OK: "pass", Exit.GATE: "fail", Exit.USER: "error", Exit.INTERNAL: "crash"}


def of_gate(gate: Mapping[str, Any]) -> Exit:
    """The exit code of a verdict (a report's ``gate`` section): OK only when it passes."""
    return Exit.OK if gate.get("verdict") == "pass" else Exit.GATE
