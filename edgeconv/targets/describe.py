"""A target's rules as text, from the same rule texts the checker reports."""

from __future__ import annotations

from .target import Rule, Target


def _rule_line(target: Target, op: str, rule: Rule) -> str:
    extra = f" [{rule.source}]" if rule.source else ""
    status = "" if rule.status.value == "unsupported" else f" (violation: {rule.status.value})"
    line = f"  - {target.name}.{op}.{rule.id}: {rule.text}{status}{extra}"
    return line + (f"\n      fix: {rule.fix}" if rule.fix else "")


def describe(target: Target) -> str:
    lines = [f"{target.name}: {target.title}", ""]
    if target.description:
        lines += [target.description, ""]
    lines.append("Rules for every op:")
    lines += [_rule_line(target, "<OP>", r) for r in target.all_ops]
    lines += ["", f"Supported ops ({len(target.ops)}), with their own rules:"]
    for name, entry in sorted(target.ops.items()):
        note = f" ({entry.note})" if entry.note else ""
        lines.append(f"{name} [{entry.source}]{note}")
        lines += [_rule_line(target, name.split(':')[0], r) for r in entry.rules]
    lines += ["", f"Any other op: {target.unlisted.status.value} ({target.name}.<OP>.op_listed: "
              f"{target.unlisted.text})"]
    if target.unlisted.fix:
        lines.append(f"  fix: {target.unlisted.fix}")
    if target.notes:
        lines += ["", "Known unsupported ops:"]
        lines += [f"  {name}: {n.detail}" + (f" Fix: {n.fix}" if n.fix else "")
                  for name, n in sorted(target.notes.items())]
    lines += ["", "Sources:"]
    lines += [f"  {key}: {text}" for key, text in target.sources.items()]
    return "\n".join(lines)
