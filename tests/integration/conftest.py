"""Fixtures of the tests that convert."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _builds_prepared() -> None:
    """As a program calling ``edgeconv.build`` several times does (docs/COMMANDS.md, Python API): the converter
    workers' template forked before any test here starts TensorFlow's runtime (a test making its Keras model
    does), so each build forks its worker from it instead of starting an interpreter that imports
    TensorFlow again (about 7 s of CPU a build). A test of a first build's own worker runs it in a fresh process."""
    import edgeconv

    assert edgeconv.prepare_builds()
