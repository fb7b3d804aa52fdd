"""Write edgeconv/targets/compiled/<name>.json for every built-in target, and runtime_versions.json for the
op-version table (see edgeconv/targets/compiled.py).

    python scripts/gen_compiled_targets.py          # after editing a file in edgeconv/targets/data
    python scripts/gen_compiled_targets.py --check  # exit 1 when a twin is not what this writes
"""

from __future__ import annotations

import argparse
import sys

from edgeconv.targets import DATA_DIR, builtin_target_names
from edgeconv.targets.compiled import runtime_versions_json, to_json
from edgeconv.targets.constraints.versions import TABLE, parse_table
from edgeconv.targets.target import load_target_file
from edgeconv.targets.twins import COMPILED_DIR, dumps


def render() -> dict[str, str]:
    """Each twin's file name and text, made from the YAML files as they are now."""
    out = {}
    for name in builtin_target_names():
        path = DATA_DIR / f"{name}.yaml"
        out[f"{name}.json"] = dumps(to_json(load_target_file(path, expected_name=name), path.read_bytes()))
    out["runtime_versions.json"] = dumps(runtime_versions_json(parse_table(), TABLE.read_bytes()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when a twin is not what this writes")
    args = parser.parse_args()
    twins = render()
    stale = sorted({p.name for p in COMPILED_DIR.glob("*.json")} - set(twins))
    if args.check:
        wrong = [n for n, text in twins.items() if not (COMPILED_DIR / n).is_file()
                 or (COMPILED_DIR / n).read_text(encoding="utf-8") != text]
        if wrong or stale:
            sys.exit(f"out of date in {COMPILED_DIR}: {', '.join(wrong + stale)}; run "
                     "python scripts/gen_compiled_targets.py")
        return
    for name in stale:
        (COMPILED_DIR / name).unlink()
    for name, text in twins.items():
        (COMPILED_DIR / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(twins)} files to {COMPILED_DIR}")


if __name__ == "__main__":
    main()
