"""Unit tests never import TensorFlow; this guard fails a unit test that does.

(tests/unit runs before tests/integration; see testpaths in pyproject.toml.)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_tensorflow() -> Iterator[None]:
    before = "tensorflow" in sys.modules
    yield
    if not before:
        assert "tensorflow" not in sys.modules, "a unit test imported TensorFlow"
