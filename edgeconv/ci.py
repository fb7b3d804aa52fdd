"""What CI systems read: JUnit XML, a Markdown summary (GitHub's step summary, a PR comment) and
GitHub workflow annotations, made from the outcome of one or more pipeline builds.

Everything here renders the build's verdict (``report["gate"]``, :mod:`edgeconv.verdict`) and decides
nothing. JUnit: one test suite per pipeline; one test case per check of the verdict (a target's
failure carries each op that is not supported: index, type, effect, rule id, detail and source
layers; a default gate the pipeline turned off is skipped, saying so); a pipeline that could not be
built is one test case with an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import markdown as md
from . import verdict
from ._record import record
from .errors import rel
from .exit_codes import WORDS
from .report import first_cause

if TYPE_CHECKING:
    from . import report_model as rm

_PROBLEM = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+): (?P<message>.*)$")
EXIT_WORDS = WORDS  # exit code -> word, from the one table (edgeconv.exit_codes)


@record
class Outcome:
    """One pipeline's build: its exit code, and its report or error message."""

    pipeline: Path
    code: int
    seconds: float
    report: rm.Report | None = None
    report_dir: Path | None = None
    error: str | None = None  # the one-line messages of exit 2/3
    cached: bool = False
    crash_log: Path | None = None  # exit 3: where its traceback is

    @property
    def name(self) -> str:
        return str(self.report["name"]) if self.report else self.pipeline.stem


def worst(outcomes: Sequence[Outcome]) -> int:
    """The exit code of several builds: the worst of them (crash > error > fail > pass)."""
    return max((o.code for o in outcomes), default=0)


def _op_lines(target: rm.TargetVerdict) -> list[str]:
    lines = []
    for op in target["ops"]:
        if op.get("follows_blocking_op"):
            continue
        for v in op["violations"]:
            layers = f" (layers {', '.join(op['source_layers'])})" if op.get("source_layers") else ""
            lines.append(f"#{op['index']} {op['type']} [{v['effect']}] {v['rule']}: {v['detail']}{layers}")
    return lines


def _cases(report: rm.Report) -> list[tuple[str, rm.Check]]:
    """The checks of a build as test cases (JUnit and the step summary's table): name and check."""
    # A warning is not a test; it is in the report and the annotations.
    return [(f"target {c['target']}" if c["kind"] == "target" and c.get("target") else c["id"], c)
            for c in report["gate"].get("checks", []) if c["outcome"] != "warn"]


def checks_markdown(outcomes: Sequence[Outcome]) -> str:
    """The JUnit test cases as a table (for the job's step summary, where a reviewer sees them without
    a test-report action): per pipeline, each check with its outcome and sentence, failures first."""
    lines = []
    order = {"fail": 0, "error": 0, "off": 1, "pass": 2}
    mark = {"pass": "✅ pass", "fail": "❌ fail", "error": "❌ error", "off": "⏭ off"}
    for o in outcomes:
        if o.report is None:
            continue
        cases = sorted(_cases(o.report), key=lambda nc: order.get(nc[1]["outcome"], 1))
        failed = sum(verdict.fails(c["outcome"]) for _, c in cases)
        title = md.html(f"{rel(o.pipeline)} ({o.name}): {len(cases)} checks, {failed} failed (JUnit)")
        lines += ["", f"<details{' open' if failed else ''}><summary>{title}</summary>", "",
                  "| check | result | |", "|---|---|---|"]
        lines += [f"| {md.code(name, cell=True)} | {mark.get(c['outcome']) or md.text(c['outcome'])} | "
                  f"{md.text(c['sentence'])} |" for name, c in cases]
        lines += ["", "</details>"]
    return "\n".join(lines).lstrip("\n") + ("\n" if lines else "")


def junit_xml(outcomes: Sequence[Outcome]) -> str:
    import xml.etree.ElementTree as ET

    suites = ET.Element("testsuites", name="edgeconv")
    total = failed = errors = 0
    for o in outcomes:
        suite = ET.SubElement(suites, "testsuite", name=rel(o.pipeline), file=rel(o.pipeline))
        cases = 0
        fails = errs = skipped = 0
        if o.report is None:
            case = ET.SubElement(suite, "testcase", name="build", classname=f"edgeconv.{o.name}",
                                 time=f"{o.seconds:.3f}")
            err = ET.SubElement(case, "error", type=EXIT_WORDS.get(o.code, str(o.code)),
                                message=(o.error or "").splitlines()[0] if o.error else "build failed")
            err.text = o.error or ""
            cases, errs = 1, 1
        else:
            targets = {t["name"]: t for t in o.report["targets"]}
            for name, c in _cases(o.report):
                case = ET.SubElement(suite, "testcase", name=name, classname=f"edgeconv.{o.name}", time="0")
                cases += 1
                if c["outcome"] == "off":
                    ET.SubElement(case, "skipped", message=c["sentence"])
                    skipped += 1
                elif verdict.fails(c["outcome"]):
                    failure = ET.SubElement(case, "failure", type=c["kind"], message=c["sentence"])
                    target = targets.get(c.get("target") or "") if c["kind"] == "target" else None
                    detail = _op_lines(target) if target is not None else []
                    failure.text = "\n".join([c["sentence"], *detail])
                    fails += 1
        suite.set("tests", str(cases))
        suite.set("failures", str(fails))
        suite.set("errors", str(errs))
        suite.set("skipped", str(skipped))
        suite.set("time", f"{o.seconds:.3f}")
        total, failed, errors = total + cases, failed + fails, errors + errs
    suites.set("tests", str(total))
    suites.set("failures", str(failed))
    suites.set("errors", str(errors))
    suites.set("time", f"{sum(o.seconds for o in outcomes):.3f}")
    for element in suites.iter():  # a model's or a data file's text can hold what XML 1.0 cannot
        element.text = _xml_text(element.text) if element.text else element.text
        element.attrib.update({k: _xml_text(v) for k, v in element.attrib.items()})
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: str) -> str:
    """``text`` with the characters XML 1.0 does not allow (control characters other than tab and newline)
    replaced by U+FFFD: ElementTree writes them as they are, and a JUnit reader refuses the whole file."""
    return _NOT_XML.sub("\ufffd", text)


def _why(report: rm.Report) -> list[str]:
    """The reasons a build failed, then the diagnosis' first cause."""
    cause = first_cause(report)
    return [*report["gate"]["reasons"], *([cause] if cause is not None else [])]


@record
class SummaryRow:
    """One pipeline in the summary of several: what the Markdown summary and the console's table show."""

    pipeline: str
    result: str  # pass, fail, error, crash, ...
    cached: bool
    size: str  # "36,528 B" or "-"
    targets: tuple[tuple[str, bool], ...]  # (target, passes)
    parity: str
    report: str  # the report.md path or "-"


def summary_rows(outcomes: Sequence[Outcome]) -> list[SummaryRow]:
    rows = []
    for o in outcomes:
        result = str(EXIT_WORDS.get(o.code, o.code))
        if o.report is None:
            rows.append(SummaryRow(rel(o.pipeline), result, False, "-", (), "-", "-"))
            continue
        r = o.report
        targets = tuple((t["name"], verdict.target_passes(t, r["gate"]["checks"])) for t in r["targets"])
        p = r.get("parity")
        parity = _parity_cell(p) if p else "-"
        report = rel(o.report_dir / "report.md") if o.report_dir else "-"
        rows.append(SummaryRow(rel(o.pipeline), result, o.cached, f"{r['tflite']['bytes']:,} B", targets, parity,
                               report))
    return rows


def _parity_cell(p: Mapping[str, Any]) -> str:
    """The built model's accuracy and its drop, else its worst SQNR, else "-". Numbers only: the accuracy's
    values are open in the report schema, and a results file from another job may have been edited."""
    from .diff import number_at

    acc = p.get("accuracy")
    built = number_at(acc, "built")
    lost = number_at(acc.get("drop") if isinstance(acc, Mapping) else None, "built")
    if built is not None and lost is not None:
        return f"accuracy {built:.2%} (drop {lost * 100:.2f} points)"
    sqnr = [m["built"]["sqnr_db"] for m in p["outputs"].values() if m.get("built") and m["built"]["sqnr_db"]]
    return f"SQNR {min(sqnr):.1f} dB" if sqnr else "-"


def summary_notes(outcomes: Sequence[Outcome]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The sections under the table: what failed and why, repairs that changed the interface, loosened
    defaults; each a title and its lines as (pipeline, the rest of the line)."""
    sections: list[tuple[str, list[tuple[str, str]]]] = []
    why = [(rel(o.pipeline), f" ({o.name}): {reason}") for o in outcomes
           for reason in (_why(o.report) if o.report else [])]
    why += [(rel(o.pipeline), f": {line}") for o in outcomes if o.report is None
            for line in (o.error or "").splitlines()]
    if why:
        sections.append(("Why", why))
    changed = [(rel(o.pipeline), f" ({o.name}): {found['summary']}") for o in outcomes
               if o.report and (found := o.report.get("repair")) and found["chosen"] is not None
               and found["trials"][found["chosen"] - 1].get("interface_change")]
    if changed:
        sections.append(("Repaired with a change to the model's interface", changed))
    disabled = [(rel(o.pipeline), f" ({o.name}): {note}") for o in outcomes
                for note in (o.report["gate"].get("disabled", []) if o.report else [])]
    if disabled:
        sections.append(("Default gates loosened by the pipeline", disabled))
    return sections


def regressions(outcomes: Sequence[Outcome]) -> list[tuple[str, str]]:
    """What got worse since the baseline (build --baseline), per pipeline: (pipeline, the rest of the line)."""
    return [(rel(o.pipeline), f" ({o.name}): {line}") for o in outcomes
            if o.report and (base := o.report.get("baseline")) for line in base["regressions"]]


def summary_markdown(outcomes: Sequence[Outcome]) -> str:
    """The regressions against the baseline first, then one table for every pipeline, then what failed and
    why; for a step summary or a PR comment."""
    word = EXIT_WORDS.get(worst(outcomes), "crash").upper()
    lines = [f"## edgeconv: {word}", ""]
    worse = regressions(outcomes)
    if worse:
        lines += ["### Regressions against the baseline", "", *(f"- {md.code(p)}{md.text(rest)}" for p, rest in worse),
                  ""]
    lines += ["| pipeline | result | size | targets | parity | report |", "|---|---|---|---|---|---|"]
    for row in summary_rows(outcomes):
        targets = ", ".join(f"{md.text(name)} {'✅' if ok else '❌'}" for name, ok in row.targets) or "-"
        report = md.code(row.report, cell=True) if row.report != "-" else "-"
        lines.append(f"| {md.code(row.pipeline, cell=True)} | **{row.result}**{' (cached)' if row.cached else ''} | "
                     f"{row.size} | {targets} | {row.parity} | {report} |")  # parity: edgeconv's numbers or "-"
    for title, notes in summary_notes(outcomes):
        lines += ["", f"### {title}", ""]
        lines += [f"- {md.code(pipeline)}{md.text(rest)}" for pipeline, rest in notes]
    return "\n".join(lines) + "\n"


def workflow_commands(outcomes: Sequence[Outcome]) -> list[str]:
    """GitHub workflow commands: config problems at their pipeline line, gate failures at the pipeline."""
    out = []
    for o in outcomes:
        if o.report is None:
            for line in (o.error or "").splitlines():
                found = _PROBLEM.match(line)
                if found:
                    out.append(f"::error file={_escape_property(found['file'])},line={found['line']},"
                               f"title=edgeconv config::{_escape(found['message'])}")
                else:
                    out.append(f"::error file={_escape_property(rel(o.pipeline))},title=edgeconv build::"
                               f"{_escape(line)}")
            continue
        level = {"fail": "error", "error": "error", "warn": "warning", "off": "notice"}
        for c in o.report["gate"].get("checks", []):
            if c["outcome"] in level:
                title = _escape_property(f"edgeconv {c['kind']} ({o.name})")
                out.append(f"::{level[c['outcome']]} file={_escape_property(rel(o.pipeline))},title={title}::"
                           f"{_escape(c['sentence'])}")
        why = first_cause(o.report)
        if why is not None:
            out.append(f"::error file={_escape_property(rel(o.pipeline))},"
                       f"title={_escape_property(f'edgeconv diagnosis ({o.name})')}::{_escape(why)}")
    return out


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


def check_destinations(junit: Path | None, summary: Path | None, results_json: Path | None) -> None:
    """--junit, --summary and --results-json are written after the builds: a destination that cannot be
    written is refused before them, not found out after minutes of work. (--baseline is read and
    checked by each build before its heavy work.)"""
    import os

    from .errors import EdgeconvError
    from .output import existing_ancestor

    problems = []
    for flag, path in (("junit", junit), ("summary", summary), ("results_json", results_json)):
        if path is None:
            continue
        name = f"--{flag.replace('_', '-')}"
        if path.is_dir():
            problems.append(f"{name} {path}: is a folder; give a file path")
            continue
        existing = existing_ancestor(path)
        if existing is not None and not existing.is_dir():
            problems.append(f"{name} {path}: {existing} is a file, not a folder")
        elif existing is not None and not os.access(existing, os.W_OK):
            problems.append(f"{name} {path}: {existing} is not writable")
    if problems:
        raise EdgeconvError("\n".join(problems))


def write_outputs(outcomes: Sequence[Outcome], *, junit: Path | None = None, summary: Path | None = None,
                  results: tuple[Path, dict[str, Any]] | None = None) -> list[str]:
    """JUnit XML, the Markdown summary and the results JSON (a path and its document, from
    ``shards.results_document``) where asked, each written whole (atomically); on GitHub Actions the step
    summary too. Returns the workflow commands (annotations) to print there."""
    import json
    import os

    from .output import write_atomically

    text = summary_markdown(outcomes)
    if junit is not None:
        write_atomically(junit, junit_xml(outcomes))
    if summary is not None:
        write_atomically(summary, text)
    if results is not None:
        write_atomically(results[0], json.dumps(results[1], indent=1) + "\n")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a") as handle:
            handle.write(text + "\n" + checks_markdown(outcomes) + "\n")
    return workflow_commands(outcomes) if os.environ.get("GITHUB_ACTIONS") == "true" else []
