"""Write tests/data/rules/<target>.txt: every rule of every built-in target, one line each, as
`<op>.<rule id> <effect> <check> <parameters as JSON>`. tests/unit/test_rule_pins.py compares the
targets with these files, so dropping a rule, changing its effect or loosening a bound fails a fast
unit test instead of passing unnoticed (a test that builds its cases from the target file loses the
case with the rule). After a deliberate change to a target: run this script and commit both.

    python scripts/pin_rules.py
"""

from __future__ import annotations

import json
from pathlib import Path

from edgeconv.targets import builtin_target_names, load_target
from edgeconv.targets.target import Rule, Target

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "rules"


def _line(scope: str, rule: Rule) -> str:
    params = json.dumps(dict(rule.params), sort_keys=True, default=str)
    return f"{scope}.{rule.id} {rule.effect.value} {rule.check} {params}"


def pinned_lines(target: Target) -> list[str]:
    lines = [_line("*", r) for r in target.all_ops]
    lines += [_line(op, r) for op, entry in sorted(target.ops.items()) for r in entry.rules]
    lines.append(_line("<unlisted>", target.unlisted))
    if target.segment_rule is not None:
        lines.append(_line("<segment>", target.segment_rule))
    if target.compiler is not None:
        lines.append(_line("<compiler>", target.compiler.rule))
    return lines


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in builtin_target_names():
        (OUT / f"{name}.txt").write_text("\n".join(pinned_lines(load_target(name))) + "\n")
        print(f"wrote {OUT / name}.txt")


if __name__ == "__main__":
    main()
