"""Every rule of every built-in target is pinned (tests/data/rules/<target>.txt, written by
scripts/pin_rules.py): dropping a rule, changing its effect, its check or a parameter fails here, with
the lines that differ. A rule test that builds its cases from the target file cannot catch a dropped
rule: its case goes with it."""

from __future__ import annotations

import sys

import pytest

from edgeconv.targets import builtin_target_names, load_target

from ..conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
from pin_rules import OUT, pinned_lines


def test_every_built_in_target_has_its_pins() -> None:
    assert sorted(p.stem for p in OUT.glob("*.txt")) == sorted(builtin_target_names())


@pytest.mark.parametrize("name", builtin_target_names())
def test_the_rules_are_the_pinned_ones(name: str) -> None:
    pinned = (OUT / f"{name}.txt").read_text().splitlines()
    now = pinned_lines(load_target(name))
    gone = [line for line in pinned if line not in now]
    added = [line for line in now if line not in pinned]
    assert (gone, added) == ([], []), ("rules changed; if on purpose, run python scripts/pin_rules.py and say why "
                                       "in the commit")
    assert now == pinned  # the order too: the checker reports violations in it
    assert len(set(now)) == len(now)


@pytest.mark.parametrize(("name", "line"), [
    ("edgetpu", "CONV_2D.dilation_equal cpu_fallback dilation_equal {}"),
    ("edgetpu", "DEPTHWISE_CONV_2D.dilation_equal cpu_fallback dilation_equal {}"),
])
def test_the_rules_a_review_found_unpinned_are_pinned(name: str, line: str) -> None:
    assert line in pinned_lines(load_target(name))
