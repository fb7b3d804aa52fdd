"""A target's rules as text, from the same rule texts the checker reports."""

from __future__ import annotations

import textwrap

from ..errors import EdgeconvError, did_you_mean
from .target import Effect, Rule, Target


def _compiler_lines(target: Target) -> list[str]:
    c = target.compiler
    assert c is not None
    return [f"Checked by running {c.tool} (accelerator {c.accelerator_config}, system {c.system_config or 'default'}, "
            f"memory mode {c.memory_mode or 'default'}); edgeconv[vela] must be installed.",
            f"{target.name}.<OP>.{c.rule.id}: {c.rule.text} (if broken: {c.rule.effect.value}) [{c.rule.source}]"]


def quantization_line(target: Target) -> str:
    """The modes a target's verdicts hold for, and why: the same text config errors and the report use."""
    q = target.quantization
    floats = "runs float ops left in a quantized model" if q.float_fallback else "runs no float ops left in a " \
        "quantized model (quantization.keep_float)"
    why = f" {q.why}" if q.why else ""
    return f"Quantization modes: {', '.join(q.modes)}; {floats}.{why}" + (f" [{q.source}]" if q.source else "")


def _wrap(text: str, width: int, indent: str, first: str | None = None) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=first if first is not None else indent,
                         subsequent_indent=indent, break_on_hyphens=False, break_long_words=False) or [first or indent]


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text[-1] in ".!?)" else text + "."


def _rule_block(rule_name: str, rule: Rule, width: int,
                groups: list[tuple[tuple[str, str], list[str]]] | None = None) -> list[str]:
    """A rule once: its id, what breaking it means and its source; then its text (per group of ops
    when the text or the source differs by op) and its fix."""
    effect = "" if rule.effect is Effect.UNSUPPORTED else f" (if broken: {rule.effect.value})"
    sources = {source for (_, source), _ in groups} if groups is not None else {rule.source}
    one_source = len(sources) == 1
    lines = [f"  {rule_name}{effect}" + (f" [{rule.source}]" if rule.source and one_source else "")]
    if groups is None:
        lines += _wrap(rule.text, width, "      ")
    else:
        for (text, source), ops in groups:
            lines += _wrap(", ".join(ops) + (f" [{source}]" if not one_source else "") + ":", width, "      ")
            lines += _wrap(text, width, "        ")
    if rule.fix:
        lines += _wrap(_sentence(rule.fix), width, "      ", "      Fix: ")
    return lines


def describe(target: Target, *, width: int = 100, op: str | None = None) -> str:
    """The target's rules, each once with the ops it applies to (``op``: only the rules of that op)."""
    if op is not None:
        return _describe_op(target, op, width)
    lines = [f"{target.name}: {target.title}", ""]
    if target.description:
        lines += [*_wrap(target.description, width, ""), ""]
    lines += [*_wrap(quantization_line(target), width, ""), ""]
    if target.compiler is not None:
        lines += [*(line for text in _compiler_lines(target) for line in _wrap(text, width, "")), "", "Sources:"]
        return "\n".join(lines + [line for key, text in target.sources.items()
                                  for line in _wrap(f"{key}: {text}", width, "    ", "  ")])
    lines.append("Rules for every op:")
    for rule in target.all_ops:
        lines += _rule_block(f"{target.name}.<OP>.{rule.id}", rule, width)
    ops = sorted(target.ops)
    lines += ["", *_wrap(f"Supported ops ({len(ops)}): {', '.join(ops)}.", width, "  ", "")]
    # Each op rule once: grouped by id, effect and fix; its text (and source) per group of ops sharing it.
    grouped: dict[tuple[str, str, str], dict[tuple[str, str], list[str]]] = {}
    first: dict[tuple[str, str, str], Rule] = {}
    for name in ops:
        for rule in target.ops[name].rules:
            key = (rule.id, rule.effect.value, rule.fix)
            first.setdefault(key, rule)
            grouped.setdefault(key, {}).setdefault((rule.text, rule.source), []).append(name)
    if grouped:
        lines += ["", "Rules of the supported ops, each with the ops it applies to:"]
        for key, texts in grouped.items():
            lines += _rule_block(f"{target.name}.<OP>.{key[0]}", first[key], width, list(texts.items()))
    notes = [(name, entry.note) for name, entry in sorted(target.ops.items()) if entry.note]
    if notes:
        lines += ["", "Notes on supported ops:"]
        lines += [line for name, note in notes for line in _wrap(f"{name}: {note}", width, "    ", "  ")]
    if target.segment_rule is not None:
        lines += ["", "Placement:"]
        lines += _rule_block(f"{target.name}.<OP>.single_segment", target.segment_rule, width)
    lines += ["", f"Any other op: {target.unlisted.effect.value}"]
    lines += _rule_block(f"{target.name}.<OP>.op_listed", target.unlisted, width)
    if target.notes:
        lines += ["", "Known unsupported ops:"]
        for name, n in sorted(target.notes.items()):
            lines += _wrap(_sentence(n.detail) + (f" Fix: {_sentence(n.fix)}" if n.fix else ""), width, "    ",
                           f"  {name}: ")
    lines += ["", "Sources:"]
    lines += [line for key, text in target.sources.items() for line in _wrap(f"{key}: {text}", width, "    ", "  ")]
    return "\n".join(lines)


def _op_name(target: Target, op: str) -> str:
    """The op as the target's rules name it: a TFLite builtin (any case) or ``CUSTOM:<code>``."""
    from ..converters.tflite_ops import BUILTIN_OP_NAMES

    if op.upper().startswith("CUSTOM:"):
        return "CUSTOM:" + op.split(":", 1)[1]
    known = sorted({*BUILTIN_OP_NAMES, *target.ops})
    if op.upper() in known:
        return op.upper()
    raise EdgeconvError(f"unknown op {op!r}: not a TFLite builtin op nor CUSTOM:<code>"
                        f"{did_you_mean(op.upper(), known)}")


def _describe_op(target: Target, op: str, width: int) -> str:
    """One op's rules on the target, with their full ids (those its reports name)."""
    name = _op_name(target, op)
    lines = [f"{target.name}: {name}", ""]
    entry = target.ops.get(name)
    if target.compiler is not None:
        lines += _wrap(f"Checked by {target.compiler.tool} on the model, not by rules per op.", width, "")
        return "\n".join(lines)
    for rule in target.all_ops:
        lines += _rule_block(f"{target.name}.{name}.{rule.id}", rule, width)
    if entry is None:
        lines += [f"  not a supported op: {target.unlisted.effect.value}"]
        lines += _rule_block(f"{target.name}.{name}.op_listed", target.unlisted, width)
        note = target.notes.get(name)
        if note is not None:
            lines += _wrap(_sentence(note.detail) + (f" Fix: {_sentence(note.fix)}" if note.fix else ""), width,
                           "      ", "      Known: ")
        return "\n".join(lines)
    lines += _wrap(f"Supported [{entry.source}]" + (f": {entry.note}" if entry.note else "."), width, "    ", "  ")
    for rule in entry.rules:
        lines += _rule_block(f"{target.name}.{name}.{rule.id}", rule, width)
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def supported_ops_markdown(targets: list[Target]) -> str:
    """docs/SUPPORTED_OPS.md: every built-in target's rules, from the same texts the checker reports."""
    lines = ["# Supported ops", "",
             "Generated by `python scripts/gen_supported_ops.py` from the target files in "
             "`edgeconv/targets/data/` and the constraint docstrings; do not edit by hand.", ""]
    lines += [f"- [{t.name}](#{t.name}): {t.title}" for t in targets]
    for t in targets:
        lines += ["", f"## {t.name}", "", f"**{t.title}.** {t.description}", "", _md(quantization_line(t)), ""]
        if t.compiler is not None:
            lines += [_md(line) for line in _compiler_lines(t)] + ["", "Sources:", ""]
            lines += [f"- **{key}**: {text}" for key, text in t.sources.items()]
            continue
        if t.segment_rule is not None:
            lines += [f"Placement (`{t.name}.<OP>.single_segment`, {t.segment_rule.effect.value}): "
                      f"{t.segment_rule.text} [{t.segment_rule.source}]", ""]
        lines += ["Rules for every op:", "", "| rule | if broken | text | source |", "|---|---|---|---|"]
        lines += [f"| `{t.name}.<OP>.{r.id}` | {r.effect.value} | {_md(r.text)} | {r.source} |" for r in t.all_ops]
        lines += ["", f"Ops in the table ({len(t.ops)}); any other op: **{t.unlisted.effect.value}** "
                  f"(`{t.name}.<OP>.op_listed`).", "", "| op | rules (if broken) | source | note |",
                  "|---|---|---|---|"]
        for name, entry in sorted(t.ops.items()):
            rules = "<br>".join(f"`{r.id}` ({r.effect.value}): {_md(r.text)}" for r in entry.rules) or "-"
            lines.append(f"| {name} | {rules} | {entry.source} | {_md(entry.note) or '-'} |")
        if t.notes:
            lines += ["", "Known unsupported ops:", "", "| op | why | fix |", "|---|---|---|"]
            lines += [f"| {name} | {_md(n.detail)} | {_md(n.fix) or '-'} |" for name, n in sorted(t.notes.items())]
        lines += ["", "Sources:", ""]
        lines += [f"- **{key}**: {text}" for key, text in t.sources.items()]
    return "\n".join(lines) + "\n"
