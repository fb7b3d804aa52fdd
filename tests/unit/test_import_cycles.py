"""Lower layers do not import upward: at most 3 import cycles in the package, none through pipeline.py
(the build's table of contents) or cli.py (scripts/import_cycles.py counts them)."""

from __future__ import annotations

import sys

from ..conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
from import_cycles import cycles


def test_at_most_three_import_cycles_none_through_the_pipeline_or_the_cli() -> None:
    groups = cycles()
    assert len(groups) <= 3, groups
    assert not [g for g in groups if "edgeconv.pipeline" in g or "edgeconv.cli" in g], groups
