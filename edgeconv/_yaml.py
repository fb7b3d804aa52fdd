"""YAML reading that keeps line numbers, so errors can point at the mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, rel


def compose_file(path: Path) -> yaml.Node:
    """Parse a YAML file into a node tree (values keep their line numbers).

    Raises ConfigError for a missing/unreadable file or invalid YAML.
    """
    shown = rel(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{shown}: file not found"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{shown}: is a directory, expected a YAML file"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{shown}: not a UTF-8 text file ({exc.reason})"]) from None
    except OSError as exc:
        raise ConfigError([f"{shown}: cannot read: {exc.strerror}"]) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError([f"{where}: invalid YAML: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{shown}: invalid YAML: {exc}"]) from None
    if node is None:
        raise ConfigError([f"{shown}: the file is empty"])
    return node


def line_of(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def dump(data: Any) -> str:
    """Block-style YAML with keys in the given order."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
