"""Write docs/SUPPORTED_OPS.md from the built-in target files and the constraint docstrings.

    python scripts/gen_supported_ops.py [--check]

--check exits 1 when the committed file is stale (the test suite runs the same check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgeconv.targets import builtin_target_names, load_target
from edgeconv.targets.describe import supported_ops_markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "SUPPORTED_OPS.md"


def render() -> str:
    return supported_ops_markdown([load_target(name) for name in builtin_target_names()])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when the committed file is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if DOC.read_text() != text:
            print(f"{DOC} is stale: run python scripts/gen_supported_ops.py", file=sys.stderr)
            return 1
        return 0
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
