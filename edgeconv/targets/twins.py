"""JSON twins of edgeconv's own YAML data files, checked against the bytes they were made from.

A twin records the SHA-256 of the YAML it was made from; :func:`twin_of` returns it only while that digest
is the YAML file's now. The built-in targets' twins are :mod:`.compiled`'s; the op-version table's is read
by :mod:`.constraints.versions`. Nothing here imports a target (both use it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .._log import get_logger

COMPILED_DIR = Path(__file__).parent / "compiled"
FORMAT = 1  # bump when a twin's shape changes: an older twin is then not read
log = get_logger(__name__)


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def stamp(yaml_bytes: bytes) -> dict[str, Any]:
    """The head of a twin made from ``yaml_bytes``."""
    return {"format": FORMAT, "yaml_sha256": hashlib.sha256(yaml_bytes).hexdigest()}


def twin_of(yaml_path: Path, twin: Path) -> dict[str, Any] | None:
    """The JSON document ``twin`` when it was made from the bytes ``yaml_path`` holds now, else None (no
    twin, unreadable, another format, or made from other bytes: then the caller parses the YAML)."""
    try:
        digest = hashlib.sha256(yaml_path.read_bytes()).hexdigest()
        doc = json.loads(twin.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("yaml_sha256") != digest:
        log.debug("%s does not match %s: parsing the YAML", twin.name, yaml_path.name)
        return None
    return doc
