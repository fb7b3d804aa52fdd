"""libyaml composes valid files; the pure-Python loader composes the rest and words every error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edgeconv import _yaml
from edgeconv.errors import ConfigError

from ..conftest import REPO

SHIPPED = sorted(p for pattern in ("*.yaml", "edgeconv/**/*.yaml", "examples/**/*.yaml", "tests/data/**/*.yaml")
                 for p in REPO.glob(pattern))


def _shape(node: yaml.Node) -> tuple[object, ...]:
    """Everything the config and target parsers read from a node: tag, style, value and where it is."""
    where = (node.start_mark.line, node.start_mark.column, node.end_mark.line, node.end_mark.column)
    if isinstance(node, yaml.ScalarNode):
        return ("scalar", node.tag, node.style, node.value, *where)
    if isinstance(node, yaml.SequenceNode):
        return ("seq", node.tag, node.flow_style, *where, tuple(_shape(child) for child in node.value))
    return ("map", node.tag, node.flow_style, *where, tuple((_shape(k), _shape(v)) for k, v in node.value))


def _pure(text: str) -> yaml.Node:
    loader = _yaml._DepthLimitedLoader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    assert node is not None
    return node


SNIPPETS = [
    "a: 1\nb: '2'\nc: \"3\"\nd: ~\ne: [1, {f: g}]\n",
    "anchors:\n  base: &b {x: 1, y: [2, 3]}\n  copy: *b\n  merged:\n    <<: *b\n    z: 4\n",
    "text: |\n  two\n  lines\nfolded: >-\n  one\n  line\n",
    "# a comment\n- 1.5\n- -2\n- true\n- 2026-12-04\n- !!str 7\n- ''\n",
    "unicode: \"caf\\u00e9 \\U0001F600\"\nplain: naïve\n",
    "key with spaces: value, with comma\n? complex\n: value\n",
]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_libyaml_composes_every_shipped_file_as_the_pure_loader_does(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    fast = _yaml._compose_with_libyaml(text)
    assert fast is not None
    assert _shape(fast) == _shape(_pure(text))


@pytest.mark.parametrize("text", SNIPPETS)
def test_libyaml_composes_each_yaml_feature_as_the_pure_loader_does(text: str) -> None:
    fast = _yaml._compose_with_libyaml(text)
    assert fast is not None
    assert _shape(fast) == _shape(_pure(text))
    assert _yaml.to_python(fast) == yaml.safe_load(text)


@pytest.mark.parametrize(("text", "composed"), [
    ("a: " + "[" * 31 + "]" * 31 + "\n", True),  # the file's mapping + 31 lists: 32 levels, just inside
    ("a: " + "[" * 32 + "]" * 32 + "\n", False),  # 33 levels: the pure loader says where
    ("a: [1, 2\n", False),  # invalid: the pure loader words the error
    ("a: 1\n\tb: 2\n", False),
    ("", False),  # empty: the pure loader says so
    ("# only a comment\n", False),
])
def test_libyaml_leaves_deep_invalid_and_empty_files_to_the_pure_loader(text: str, composed: bool) -> None:
    assert (_yaml._scan(text, "f.yaml") and _yaml._compose_with_libyaml(text) is not None) is composed


@pytest.mark.parametrize("with_libyaml", [True, False])
def test_errors_read_the_same_with_or_without_libyaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      with_libyaml: bool) -> None:
    monkeypatch.setattr(yaml, "__with_libyaml__", with_libyaml)
    (tmp_path / "good.yaml").write_text("a: [1, 2]\n")
    (tmp_path / "bad.yaml").write_text("a: 1\nb: [1, 2\n")
    assert _shape(_yaml.compose_file(tmp_path / "good.yaml")) == _shape(_pure("a: [1, 2]\n"))
    with pytest.raises(ConfigError) as info:
        _yaml.compose_file(tmp_path / "bad.yaml")
    assert str(info.value).endswith("bad.yaml:3:1: invalid YAML: expected ',' or ']', but got '<stream end>'")


def _bomb(levels: int) -> str:
    """Each level a list of six aliases of the level before: levels of 7, 43, 259, 1,555 and 9,331 nodes once
    expanded, so aliases add 42 + 258 + 1,548 + 9,330 by the fifth line."""
    lines = ["l0: &l0 [1, 1, 1, 1, 1, 1]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 6)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("with_libyaml", [True, False])
@pytest.mark.parametrize(("text", "message"), [
    ("x-a: &a [*a]\n", "f.yaml:1: the alias *a refers to the node &a that holds it (a cycle); write the value out"),
    ("a: &a {b: *a}\n", "f.yaml:1: the alias *a refers to the node &a that holds it (a cycle); write the value out"),
    ("a: &a\n  b:\n    - c: *a\n", "f.yaml:3: the alias *a refers to the node &a that holds it (a cycle); write "
     "the value out"),
    (_bomb(9), "f.yaml:5: the aliases expand to more than 10,000 nodes (an alias bomb?); a pipeline file needs a few"),
    # 2,000-item list (2,001 nodes) aliased 5 times: 10,005 added, just outside the budget
    ("a: &a [" + ", ".join(["1"] * 2000) + "]\n" + "".join(f"b{i}: *a\n" for i in range(5)),
     "f.yaml:6: the aliases expand to more than 10,000 nodes (an alias bomb?); a pipeline file needs a few"),
    ("- 1\n" * 20_001, "f.yaml:20000: more than 20,000 values; a pipeline or target file holds a few thousand at most"),
])
def test_cyclic_aliases_alias_bombs_and_huge_files_are_refused_with_the_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_libyaml: bool, text: str, message: str) -> None:
    monkeypatch.setattr(yaml, "__with_libyaml__", with_libyaml)
    (tmp_path / "f.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        _yaml.compose_file(Path("f.yaml"))
    assert str(info.value) == message


@pytest.mark.parametrize("text", [
    # the same 2,001-node list aliased 4 times: 8,004 added, just inside
    "a: &a [" + ", ".join(["1"] * 2000) + "]\n" + "".join(f"b{i}: *a\n" for i in range(4)),
    _bomb(4),  # aliases add 1,848
    "- 1\n" * 19_999,  # the list and 19,999 items: 20,000 values, at the limit
])
def test_aliases_and_sizes_just_inside_the_bounds_compose(tmp_path: Path, text: str) -> None:
    (tmp_path / "f.yaml").write_text(text)
    assert _yaml.to_python(_yaml.compose_file(tmp_path / "f.yaml")) == yaml.safe_load(text)


def test_a_shared_node_is_walked_once_when_its_style_is_fixed() -> None:
    node = _yaml._compose_with_libyaml("a: &a {b: 1}\nc: *a\nd: *a\n")
    assert node is not None
    assert node.value[1][1] is node.value[2][1] is node.value[0][1]


@pytest.mark.parametrize("text", [
    "x-a: &a [*a]\n", _bomb(9), "- 1\n" * 249_000, "[" + "1," * 499_000 + "1]\n",
    "version: 1\nname: \"" + "x" * 990_000 + "\"\n",
    "".join(f"k{i}: {i}\n" for i in range(9_900)) + "x: [\n",  # invalid at its end: the pure loader words it
])
def test_validate_answers_any_hostile_file_up_to_1_mib_in_two_cpu_seconds(tmp_path: Path, text: str) -> None:
    import resource
    import subprocess
    import sys
    import time

    (tmp_path / "p.yaml").write_text(text)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "edgeconv", "validate", "p.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert proc.returncode == 2 and proc.stderr.startswith("edgeconv: error: p.yaml:"), proc.stderr
    # The CPU the command spent, which other work on a CI machine does not stretch as it does the wall time
    # (a loaded run took 1.63 s of wall time on the 1 MiB file the pure loader reads to its end; idle it takes
    # 0.9-1.2 s of CPU, interpreter start included). Linear, not quadratic: a hostile file cannot hang it.
    assert cpu < 2.0, f"{cpu:.2f} s of CPU ({elapsed:.2f} s wall)"
