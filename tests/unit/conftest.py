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


@pytest.fixture
def no_thread_left() -> Iterator[None]:
    """The test ends with the threads it began with (the tests of servers and of the remote cache's fetching
    thread use it): the integration tests after the unit tests fork a converter template, which they may only
    do while no other thread runs."""
    import threading
    import time

    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not set(threading.enumerate()) - before
