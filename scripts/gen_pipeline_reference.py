"""Write docs/PIPELINE_REFERENCE.md from the pipeline's JSON Schema (itself generated from the config model).

    python scripts/gen_pipeline_reference.py [--check]

Every key of pipeline.yaml with its type, default, allowed values and description, section by section.
--check exits 1 when the committed file is stale (the test suite runs the same check).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from edgeconv.config import pipeline_json_schema

DOC = Path(__file__).resolve().parent.parent / "docs" / "PIPELINE_REFERENCE.md"

HEADER = """# pipeline.yaml reference

Generated from the pipeline's JSON Schema (`edgeconv schema pipeline`, itself generated from the config model
in `edgeconv/config.py`) by `python scripts/gen_pipeline_reference.py`; a test fails when it is stale. What the
settings do, with examples: [the pipeline guide](PIPELINE.md). Unknown keys are errors; every error names the
file, line, key, bad value and allowed values, with a "did you mean".

"""


def _branches(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives a value may take, without `null` (an optional key's "not set")."""
    if "anyOf" in node:
        return [b for b in node["anyOf"] if b.get("type") != "null"]
    return [node]


def _type(node: dict[str, Any]) -> str:
    parts = []
    for branch in _branches(node):
        if "const" in branch:
            parts.append(f"`{json.dumps(branch['const'])}`")
        elif "enum" in branch:
            parts.append("one of " + ", ".join(f"`{v}`" for v in branch["enum"]))
        elif branch.get("type") == "array":
            parts.append(f"list of {_type(branch.get('items', {}))}")
        elif branch.get("type") == "object":
            name = branch.get("properties", {}).get("name", {})
            if "const" in name:
                parts.append(f"{{name: {name['const']}, ...}}")
                continue
            extra = branch.get("additionalProperties")
            if isinstance(extra, dict) and not branch.get("properties"):
                parts.append(f"{{name: {_type(extra)}}}")
            else:
                parts.append("mapping")
        elif "type" in branch:
            kinds = branch["type"]
            text = " or ".join(kinds) if isinstance(kinds, list) else str(kinds)
            bounds = [f">= {branch['minimum']}" if "minimum" in branch else "",
                      f"<= {branch['maximum']}" if "maximum" in branch else ""]
            bounds = [b for b in bounds if b]
            if branch is not node and branch.get("description"):
                bounds.append(branch["description"])
            parts.append(text + (f" ({', '.join(bounds)})" if bounds else ""))
    return " or ".join(dict.fromkeys(parts)) or "any"


def _default(node: dict[str, Any]) -> str:
    if "default" not in node:
        return ""
    return f"`{json.dumps(node['default'])}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rows(properties: dict[str, Any], prefix: str) -> list[str]:
    rows = []
    for key, node in properties.items():
        path = f"{prefix}{key}"
        rows.append(f"| `{path}` | {_cell(_type(node))} | {_default(node)} | {_cell(node.get('description', ''))} |")
        for branch in _branches(node):
            if branch.get("type") == "object" and branch.get("properties"):
                rows.extend(_rows(branch["properties"], f"{path}."))
            extra = branch.get("additionalProperties")
            if isinstance(extra, dict) and extra.get("properties"):
                rows.extend(_rows(extra["properties"], f"{path}.<name>."))
            for item in _branches(branch.get("items", {})) if branch.get("type") == "array" else []:
                name = item.get("properties", {}).get("name", {})
                if "const" in name:  # a list entry written as a mapping: {name: X, ...}
                    meaning = _cell(item.get("description", ""))
                    rows.append(f"| `{path}[] {{name: {name['const']}}}` | mapping | | {meaning} |")
                    rest = {k: v for k, v in item["properties"].items() if k != "name"}
                    rows.extend(_rows(rest, f"{path}[]."))
    return rows


def render() -> str:
    schema = pipeline_json_schema()
    required = set(schema.get("required", []))
    out = [HEADER]
    for key, node in schema["properties"].items():
        out.append(f"## `{key}`{' (required)' if key in required else ''}\n")
        if node.get("description"):
            out.append(node["description"] + "\n")
        out.append("| key | type | default | meaning |\n|---|---|---|---|")
        nested = [b for b in _branches(node) if b.get("type") == "object" and b.get("properties")]
        out.extend(_rows(nested[0]["properties"], f"{key}.") if nested else _rows({key: node}, ""))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when the committed file is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not DOC.is_file() or DOC.read_text() != text:
            print(f"{DOC} is stale: run python scripts/gen_pipeline_reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
