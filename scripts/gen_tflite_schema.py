"""Write edgeconv/converters/tflite_schema.py: the part of the TFLite schema edgeconv's reader decodes, as data.

    python scripts/gen_tflite_schema.py          # rewrite the module from the installed ai-edge-litert
    python scripts/gen_tflite_schema.py --check  # exit 1 when the module differs from what it would write

The reader (edgeconv/converters/tflite_reader.py) walks the flatbuffer itself with ``struct`` and this data, so
reading a model imports neither flatbuffers, NumPy nor the 690 kB generated schema module. The data comes from
``ai_edge_litert.schema_py_generated`` (flatc's Python output for TFLite's ``schema.fbs``): its enums, and for each
table the reader needs, every field's vtable slot, kind, scalar type and default, read from the generated
accessor methods. tests/unit/test_reader.py runs :func:`render` against the installed module, so a newer
ai-edge-litert that adds fields or options fails there with this command to run.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "edgeconv" / "converters" / "tflite_schema.py"
# The tables the reader walks, besides every builtin-options table.
MODEL_TABLES = ("Model", "OperatorCode", "Buffer", "SubGraph", "Tensor", "QuantizationParameters", "Operator",
                "SignatureDef", "TensorMap", "Metadata")
ENUMS = ("TensorType", "BuiltinOperator", "BuiltinOptions", "ActivationFunctionType", "Padding",
         "FullyConnectedOptionsWeightsFormat")
_FLAGS = {"Bool": "?", "Int8": "b", "Uint8": "B", "Int16": "h", "Uint16": "H", "Int32": "i", "Uint32": "I",
          "Int64": "q", "Uint64": "Q", "Float32": "f", "Float64": "d"}
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _field(schema: Any, table: str, attr: str) -> tuple[str, int, str, str, Any]:
    """(snake_case name, vtable offset, kind, struct format, default) of one field of ``table``."""
    method = getattr(getattr(schema, table), attr[0].upper() + attr[1:])
    source = inspect.getsource(method)
    offsets = re.findall(r"self\._tab\.Offset\((\d+)\)", source)
    if len(offsets) != 1:
        raise SystemExit(f"{table}.{attr}: expected one vtable offset in its accessor, found {offsets}")
    voffset = int(offsets[0])
    flags = re.findall(r"number_types\.(\w+)Flags, (?:a|o) \+", source)
    fmt = _FLAGS[flags[0]] if flags else ""
    indexed = list(inspect.signature(method).parameters) == ["self", "j"]
    default: Any = None
    if "Union(" in source:
        kind = "union"
    elif indexed:
        kind = "tables" if "Indirect(" in source else "strings" if "String(" in source else "vector"
    elif "String(" in source:
        kind = "string"
    elif "Indirect(" in source:
        kind = "table"
    else:
        kind = "scalar"
        default = ast.literal_eval(source.strip().splitlines()[-1].strip().removeprefix("return "))
        if not fmt:
            raise SystemExit(f"{table}.{attr}: a scalar accessor without a number type")
    if kind == "vector" and not fmt:
        raise SystemExit(f"{table}.{attr}: a vector accessor without a number type")
    return _CAMEL.sub("_", attr).lower(), voffset, kind, fmt, default


def _table(schema: Any, table: str) -> tuple[tuple[str, int, str, str, Any], ...]:
    """Every field of ``table`` in the order flatc's object API (``<table>T``) lists them."""
    params = list(inspect.signature(getattr(schema, table + "T").__init__).parameters)[1:]
    return tuple(_field(schema, table, p) for p in params)


def render(litert_version: str | None = None) -> str:
    """The module's text; ``litert_version`` (default: the installed one) is only what its docstring names."""
    from ai_edge_litert import schema_py_generated as schema

    enums = {e: {code: name for name, code in vars(getattr(schema, e)).items() if not name.startswith("_")}
             for e in ENUMS}
    options = sorted(name for name in enums["BuiltinOptions"].values() if hasattr(schema, name + "T"))
    lines = [
        '"""The part of the TFLite schema edgeconv\'s reader decodes, as data. Generated: do not edit.',
        "",
        f"Written by scripts/gen_tflite_schema.py from ai-edge-litert {litert_version or version('ai-edge-litert')}"
        " (``ai_edge_litert.schema_py_generated``,",
        "flatc's Python output for TFLite's ``schema.fbs``). A field is (snake_case name, vtable offset, kind,",
        "struct format of its numbers, default); kind is scalar, vector (of numbers), string, strings, table, tables",
        "or union.",
        '"""',
        "",
        "from typing import Any",
        "",
        "Field = tuple[str, int, str, str, Any]",
        "",
    ]
    for e in ENUMS:
        lines.append(f"{_CAMEL.sub('_', e).upper()}: dict[int, str] = {{")
        lines += [f"    {code}: {name!r}," for code, name in sorted(enums[e].items())]
        lines += ["}", ""]
    lines.append("TABLES: dict[str, tuple[Field, ...]] = {")
    for table in (*MODEL_TABLES, *options):
        fields = _table(schema, table)
        if not fields:
            lines.append(f"    {table!r}: (),")
            continue
        lines.append(f"    {table!r}: (")
        lines += [f"        {f!r}," for f in fields]
        lines.append("    ),")
    lines += ["}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the module is not what this writes")
    args = parser.parse_args()
    text = render()
    if args.check:
        if OUT.read_text(encoding="utf-8") != text:
            sys.exit(f"{OUT} is out of date: run python scripts/gen_tflite_schema.py")
        return
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
