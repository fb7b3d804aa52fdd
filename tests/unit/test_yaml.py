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
    assert (_yaml._compose_with_libyaml(text) is not None) is composed


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
