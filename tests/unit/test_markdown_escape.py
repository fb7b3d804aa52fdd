"""Text from the inputs in edgeconv's Markdown shows as its characters: a model's names, a pipeline's, a
report's or results file's strings cannot add HTML, a comment hiding the rest, an image, a link, emphasis, a
heading, a table cell or a mention to report.md, `check --format md`, the step summary (a PR comment), or
`diff`. Rendered with markdown-it (CommonMark with GFM tables and strikethrough, raw HTML passed through as
GitHub passes it before sanitizing)."""

from __future__ import annotations

import copy
import html as html_lib
import json
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from edgeconv import markdown as md

from ..conftest import REPO

DATA = REPO / "tests" / "data"

EVIL = ("x_y</summary></details><!-- hidden | **PASS** _it_ ~~s~~ [docs](https://e.x) ![i](https://e.x/i.png) "
        "<img src=https://e.x/p.png> <https://e.x> @octocat `tick` ``two`` \\| \\ # - > [ref]: https://e.x")
# A value at the start of a line (a list item's text) can open a heading, a list, a quote or a definition.
STARTS = ["# heading", "- item", "+ item", "> quote", "[ref]: https://e.x", "1. item", "* item", "<!--", "`a`"]

RENDER = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")


class _Tags(HTMLParser):
    """The tags (with attributes), comments and text of rendered HTML."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []
        self.prose: list[str] = []  # the text outside code, where GitHub links a mention
        self.code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(f"<{tag}{''.join(f' {k}={v}' for k, v in attrs)}>")
        self.code += tag == "code"

    def handle_endtag(self, tag: str) -> None:
        self.tags.append(f"</{tag}>")
        self.code -= tag == "code"

    def handle_comment(self, data: str) -> None:
        self.tags.append("<!--comment-->")

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if not self.code:
            self.prose.append(data)


def rendered(markdown: str) -> _Tags:
    parsed = _Tags()
    parsed.feed(RENDER.render(markdown))
    return parsed


def shown(markdown: str) -> str:
    """What a reader sees: the rendered text, without the word joiners that stop mentions."""
    return "".join(rendered(markdown).text).replace("\u2060", "")


@pytest.mark.parametrize("value", [EVIL, *STARTS, "block_1_expand/Relu6;0", "a < b -> [1, 5]", "&lt;!-- &amp;",
                                   "ends with a backslash \\", "é_x", "", " "])
@pytest.mark.parametrize(("context", "unescape"), [
    ("{}", False), ("- {}", False), ("| a | b |\n|---|---|\n| {} | z |", False), ("**{}**", False),
    ("<details><summary>{}</summary>\n\nbody\n\n</details>", True),
])
def test_text_shows_as_its_characters_in_every_context(value: str, context: str, unescape: bool) -> None:
    escape = md.html if unescape else md.text
    out = rendered(context.format(escape(value)))
    if value.strip():  # (nothing renders no paragraph)
        assert out.tags == rendered(context.format("PLAIN")).tags  # no element, attribute, comment or cell
    text = "".join(out.text).replace("\u2060", "")
    assert value.strip() in text and "@octocat" not in "".join(out.prose)


@pytest.mark.parametrize("value", [EVIL, "a|b", "`", "``x``", " lead", "a\nb", "<!-- x -->", "@octocat"])
@pytest.mark.parametrize("cell", [False, True])
def test_code_spans_hold_their_value(value: str, cell: bool) -> None:
    context = "| a | b |\n|---|---|\n| {} | z |" if cell else "- {}"
    out = rendered(context.format(md.code(value, cell=cell)))
    assert out.tags == rendered(context.format("`PLAIN`")).tags
    code = RENDER.render(context.format(md.code(value, cell=cell)))
    inner = html_lib.unescape(code.split("<code>", 1)[1].split("</code>", 1)[0])
    assert inner == value.replace("\n", " ").strip() or inner == value.replace("\n", " ")


def test_a_fenced_block_cannot_be_closed_by_its_body() -> None:
    body = "quantization:\n  keep_float:\n    - \"a```b\"\n```\n# not a heading\n````"
    out = RENDER.render("\n".join(["before", *md.fenced(body, "yaml"), "after"]))
    assert out.count("<pre>") == 1 and "<h1>" not in out
    assert html_lib.unescape(out.split("<code class=\"language-yaml\">", 1)[1].split("</code>")[0]) == body + "\n"


# -- Every string of a real report, one at a time, through every Markdown edgeconv writes ------------------

REPORT = json.loads((DATA / "reports" / "digits.report.json").read_text())
# The sections the example's build has none of, shaped as report.py reads them (strings the writers show).
_TRIAL = {"trial": 1, "change": "int16 activations for conv", "passes_gates": False, "failed": ["accuracy drop"],
          "accuracy": 0.9, "sqnr_db": {"digit": 30.0}, "top1_agreement": {"digit": 0.99},
          "mac_share": {"edgetpu": 1.0}, "bytes": 100, "seconds": 1.0, "held_back": None,
          "interface_change": "input int8 -> float32"}
SECTIONS: dict[str, Any] = {
    "repair": {"summary": "repair: trial 1 of 1", "skipped": ["engine: not installed"], "snippet": "a: 1\n",
               "as_configured": {"failed": ["accuracy drop"], "findings": [{"severe": True, "message": "range"}]},
               "samples": {"chosen_on": 10, "held_back": 5}, "trials": [_TRIAL], "chosen": 1},
    "keep_float_suggestion": {"found": True, "layers": ["conv"], "keep_float": ["^conv$"],
                              "steps": [{"step": "1", "layers": ["conv"], "passes_gates": True, "accuracy": 0.9,
                                         "bytes": 10}]},
    "diagnosis": {"failed": ["agreement.sqnr_db.digit"],
                  "causes": [{"rank": 1, "id": "input_resolution", "confirmed": True, "sentence": "input 'x'",
                              "fix": "scale it"}]},
    "runtime_drift": {"samples": 2, "data": "evaluation", "runtimes": {
        "xnnpack": {"target": "arm-neon", "max_lsb": 1, "tensors_compared": 3,
                    "ops": [{"op": 1, "type": "CONV_2D", "tensor": "conv", "max_lsb": 1, "differ": 0.5}]},
        "tflm": {"target": "tflm-cmsis-nn", "error": "not installed"}}},
}
FULL = {**copy.deepcopy(REPORT), **copy.deepcopy(SECTIONS)}
FULL["firmware"] = {**FULL["firmware"], "files": ["model_data.cc"], "golden": {"reference": {
    "verdict": "differs", "first_difference": {"op": 1, "type": "CONV_2D", "tensor": "conv", "max_lsb": 2,
                                               "differ": 0.1}}}}


def _strings(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        if isinstance(value, str):
            yield (*path, key)
        yield from _strings(value, (*path, key))
    if isinstance(node, dict):  # a key is the model's too (an output's or a layer's name)
        for key in node:
            if isinstance(key, str) and not isinstance(node[key], (dict, list)):
                yield (*path, ("key", key))


def _set(document: Any, path: tuple[Any, ...], value: str) -> Any:
    out = copy.deepcopy(document)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if isinstance(last, tuple):  # rename a key, keeping its place
        items = list(parent.items())
        parent.clear()
        parent.update({(value if k == last[1] else k): v for k, v in items})
    else:
        parent[last] = value
    return out


def _writers() -> dict[str, Callable[[Any], str]]:
    from edgeconv.ci import Outcome, checks_markdown, summary_markdown
    from edgeconv.diff import diff, diff_markdown
    from edgeconv.report import to_markdown

    def outcome(report: Any) -> list[Outcome]:
        code = 0 if report["gate"].get("verdict") == "pass" else 1
        return [Outcome(Path("pipelines/p.yaml"), code, 1.0, report, Path("build/p"))]

    return {
        "report.md": to_markdown,
        "summary": lambda r: summary_markdown(outcome(r)),
        "checks": lambda r: checks_markdown(outcome(r)),
        "diff": lambda r: "\n".join(diff_markdown(diff(FULL, r), ["a regression"])),
    }


STRING_PATHS = list(_strings(FULL))


@pytest.mark.parametrize("writer", ["report.md", "summary", "checks", "diff"])
def test_no_string_of_a_report_changes_the_markdown_s_structure(writer: str) -> None:
    """Each string of the example's report with a repair, a keep-float suggestion, a diagnosis, runtime drift
    and golden vectors added (1,080 values and keys: its model's names, its pipeline's, the sentences made of
    them) replaced by a hostile one and by a plain one: the rendered Markdown has the same elements,
    attributes and cells either way, and no mention outside code (180 of the writers' 3,955 cases changed it
    before edgeconv.markdown)."""
    write = _writers()[writer]
    checked = 0
    for path in STRING_PATHS:
        try:
            plain = write(_set(FULL, path, "plain"))
        except (KeyError, TypeError, ValueError, AttributeError):  # a value the writer reads as a key or number
            continue
        hostile = rendered(write(_set(FULL, path, EVIL)))
        assert hostile.tags == rendered(plain).tags, (writer, path)
        assert "@octocat" not in "".join(hostile.prose), (writer, path)
        checked += 1
    assert checked > 100, checked


def test_check_markdown_of_a_model_with_hostile_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check --format md` on a .tflite whose every op output is named by a pull request: the rules' details
    quote the name, and it shows as written."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    from edgeconv.cli import main

    model = schema.ModelT.InitFromPackedBuf((DATA / "sin-island.int8.tflite").read_bytes(), 0)
    graph = model.subgraphs[0]
    for op in graph.operators:
        for index in op.outputs:
            graph.tensors[index].name = EVIL.encode()
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    (tmp_path / "evil.tflite").write_bytes(builder.Output())
    assert main(["check", str(tmp_path / "evil.tflite"), "--format", "md"]) == 1
    out = capsys.readouterr().out
    tags = rendered(out).tags
    assert not any(t.startswith(("<img", "<a ", "<!--", "<em", "<s>", "<del")) for t in tags), tags
    assert tags.count("<strong>") == 1 + 1  # **Model:** and the target's **FAIL**
    assert [t for t in tags if t in ("<td>", "<th>")].count("<th>") == 8 + 7  # the two tables' headers
    rows = RENDER.render(out).split("<tr>")[1:]
    assert all(row.count("<td>") in (0, 7, 8) for row in rows)
    assert EVIL.replace("\\", "") in shown(out).replace("\\", "")


@pytest.mark.parametrize("escape", [md.text, md.code, md.html])
def test_control_characters_show_as_the_replacement_character(escape: Callable[[str], str]) -> None:
    """A terminal control in a name (an escape sequence, DEL, C1, a bidirectional override) is shown as U+FFFD,
    as the .tflite reader shows it; a line break is a space."""
    out = escape("a\x1b[2Jb\x7fc\x9bd\u202ee\r\nf")
    assert "\x1b" not in out and "\x7f" not in out and "\x9b" not in out and "\u202e" not in out
    assert out.count("\ufffd") == 4 and "\n" not in out and "\r" not in out
