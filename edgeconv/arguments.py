"""The command line's arguments: one parser per command, with their help text and shell completion.

Parsing only: :mod:`edgeconv.cli` calls the library with what was parsed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._version import __version__


def terminal_columns() -> int:
    """The console's width as :func:`shutil.get_terminal_size` gives it ($COLUMNS when a positive number, else
    the terminal's, else 80), without importing :mod:`shutil` (see :class:`HelpFormatter`)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (ValueError, OSError):  # no terminal, or a closed or detached stream
            columns = 0
    return columns or 80


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help formatter, its width found without :mod:`shutil`: argparse makes a formatter for every
    argument it is given, and its own imports shutil for the width, with the compression modules shutil
    imports (bz2, lzma, zlib): 2-3 ms of every `edgeconv check`, which prints no help."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         terminal_columns() - 2 if width is None else width)  # as argparse's


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with :class:`HelpFormatter`; its sub-command parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def untranslated() -> None:
    """argparse's own words ("usage:", "options", "error:") taken as written, without a translation lookup.
    For the ``edgeconv`` command's process only (:func:`edgeconv.cli.program`): a host program that calls
    :func:`edgeconv.cli.main` keeps its argparse as it is.

    argparse looks each word up in the gettext domain of the program that runs it (``messages``, under the
    interpreter's ``share/locale``). In edgeconv's process, edgeconv is that program, and it ships no
    translations: the lookups find none, and they cost each run the ``locale`` module and a file search per
    word and language, 1.0-1.3 ms of an `edgeconv check` (the first lookup 0.7-1.1 ms, then 0.03 ms each)."""
    argparse._ = _as_written  # type: ignore[attr-defined]  # argparse.py: "from gettext import gettext as _, ngettext"
    argparse.ngettext = _plural_as_written  # type: ignore[attr-defined]


def _as_written(message: str) -> str:
    return message


def _plural_as_written(singular: str, plural: str, n: int) -> str:
    return singular if n == 1 else plural


def _arg(parser: Any, *names: str, **options: Any) -> Any:
    """``parser.add_argument``, typed so that argcomplete's ``completer`` can be set on what it returns
    (argparse's Action has no such field)."""
    return parser.add_argument(*names, **options)


def _files(*suffixes: str) -> Any:
    """Shell completion (argcomplete) of paths: folders, and files with these suffixes."""
    def complete(prefix: str, **_: Any) -> list[str]:
        folder, slash, start = prefix.rpartition("/")
        base = Path(folder + slash or ".")
        try:
            entries = sorted(base.iterdir())
        except OSError:
            return []
        shown = f"{folder}{slash}"
        return [f"{shown}{e.name}/" if e.is_dir() else f"{shown}{e.name}" for e in entries
                if e.name.startswith(start) and not e.name.startswith(".") and (e.is_dir() or e.suffix in suffixes)]
    return complete


def _target_names(prefix: str, **_: Any) -> list[str]:
    from .targets import builtin_target_names

    return [n for n in builtin_target_names() if n.startswith(prefix)]


def _op_names(prefix: str, **_: Any) -> list[str]:
    from .converters.tflite_ops import BUILTIN_OP_NAMES

    return sorted(n for n in BUILTIN_OP_NAMES if n.startswith(prefix.upper()))


# Every command, in the order of `edgeconv --help` (tests/unit/test_console_flags.py: the whole parser's).
COMMANDS = ("build", "validate", "check", "diff", "targets", "passes", "view", "reference", "cache", "summary",
            "schema")


def _loudness(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """-q and -v, on every command (after the command: `edgeconv check -q model.tflite`). Added to each, not
    inherited from a parent parser: a parser of its own cost every run one more parser (0.15 ms). Listed with
    the command's options, after -h (where argparse listed a parent's)."""
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("-q", "--quiet", action="store_true",
                          help="print only the result: no progress, no log lines (errors still go to stderr)")
    loudness.add_argument("-v", "--verbose", action="store_true",
                          help="also print debug lines, and the log lines of the tools edgeconv runs "
                               "(TensorFlow, LiteRT, Model Explorer) that are otherwise kept out")
    return parser


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """edgeconv's argument parser: a sub-command each, -q/-v on every one.

    With ``command`` (the command being run), only that command gets a parser (argparse makes a help
    formatter for every argument it is given, and looks up the translation of three messages for every
    parser, three file lookups each: building every command's took 12-16 ms of each run, more than `edgeconv
    check` spends on its checks). An unknown command gets every command's name and help line, so that it is
    refused with every name, as with the whole parser; ``edgeconv --help`` and shell completion get the whole
    parser."""
    top = ArgumentParser(
        prog="edgeconv",
        description="Convert TensorFlow/Keras models to gated INT8 .tflite for edge targets.",
        epilog="Exit codes: 0 pass, 1 a target or gate fails, 2 usage/config/model/data error, 3 internal error.")
    top.add_argument("--version", action="version", version=f"edgeconv {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, text: str, arguments: Callable[[argparse.ArgumentParser], None], *, flags: bool = True) -> None:
        """Command ``name`` (``flags``: it takes -q/-v itself, not only its actions)."""
        if command is not None and name != command:
            if command not in COMMANDS:  # the error names every command
                sub.add_parser(name, help=text)
            return
        made = sub.add_parser(name, help=text)
        arguments(_loudness(made) if flags else made)

    def validate(v: argparse.ArgumentParser) -> None:
        pipelines = _arg(v, "pipelines", type=Path, nargs="+", metavar="PIPELINE")
        pipelines.completer = _files(".yaml", ".yml")
        v.add_argument("--no-files", action="store_true",
                       help="the model and data files may be absent (fetched later in CI from DVC, LFS or a "
                       "bucket): check everything else (target files are still read)")

    def targets(t: argparse.ArgumentParser) -> None:
        tsub = t.add_subparsers(dest="action", required=True)
        _loudness(tsub.add_parser("list", help="list built-in targets"))
        show = _loudness(tsub.add_parser(
            "show", help="print a target's rules as text, each rule once with the ops it applies to"))
        _arg(show, "name").completer = _target_names
        _arg(show, "--op", metavar="NAME", help="only the rules of this op (e.g. CONV_2D), with their full ids"
             ).completer = _op_names

    def passes(p: argparse.ArgumentParser) -> None:
        _loudness(p.add_subparsers(dest="action", required=True).add_parser("list", help="list passes"))

    def reference(r: argparse.ArgumentParser) -> None:
        _arg(r, "model", type=Path, help="a full-integer .tflite").completer = _files(".tflite")
        _arg(r, "--inputs", type=Path, required=True, metavar="NPZ",
             help="an .npz with an array per model input (first axis: samples; float arrays are quantized with "
                  "the input's scale)").completer = _files(".npz")
        r.add_argument("--sample", type=int, default=0, metavar="K", help="which sample of the .npz (default 0)")
        r.add_argument("--out", type=Path, required=True, metavar="DIR",
                       help="folder for tensors.npz, trace.json and trace.md (replaced whole)")

    def cache(c: argparse.ArgumentParser) -> None:
        csub = c.add_subparsers(dest="action", required=True)
        for action, text in (("stats", "how many entries the cache holds, their size and their oldest and newest "
                                       "use"),
                             ("prune", "remove the entries not stored or served for a while (and what writers "
                                       "that died left)")):
            a = _loudness(csub.add_parser(action, help=text))
            a.add_argument("--cache-dir", metavar="DIR|URL",
                           help="build cache folder, or a remote one (s3://bucket/prefix, gs://...) (default: "
                                "$EDGECONV_CACHE_DIR, else ~/.cache/edgeconv)")
            if action == "prune":
                a.add_argument("--older-than", required=True, metavar="AGE",
                               help="remove the entries not used for this long: 30d, 12h, 90m, 45s")

    def summary(m: argparse.ArgumentParser) -> None:
        _arg(m, "results", type=Path, nargs="+", metavar="RESULTS",
             help="results files of every job (edgeconv build --shard K/N --results-json)"
             ).completer = _files(".json")
        m.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML of every pipeline")
        m.add_argument("--summary", type=Path, metavar="PATH",
                       help="write the Markdown summary; on GitHub Actions it is also appended to "
                            "$GITHUB_STEP_SUMMARY")

    def schema(s: argparse.ArgumentParser) -> None:
        s.add_argument("which", choices=("pipeline", "report"))

    add("build", "run pipelines: convert, quantize, check, write the output folders", _build_arguments)
    add("validate", "validate pipeline files (no TensorFlow needed)", validate)
    add("check", "check a .tflite against targets, or list an .onnx model's ops (no TensorFlow needed)",
        _check_arguments)
    add("diff", "what changed between two builds (two report.json files or output folders)", _diff_arguments)
    add("targets", "list the built-in targets or show one target's rules", targets, flags=False)
    add("passes", "list the graph passes", passes, flags=False)
    add("view", "open a build (or a .tflite) in Model Explorer with each target's verdict and the per-op "
                "quantization error on the graph (needs the view extra)", _view_arguments)
    add("reference", "compute a full-integer .tflite by hand (NumPy, as TFLite's reference kernels) and write "
                     "every tensor and each op's arithmetic (no TensorFlow needed)", reference)
    add("cache", "what the build cache holds, and removing the entries no build used lately", cache, flags=False)
    add("summary", "merge the --results-json of a job matrix's builds into one verdict: the table, JUnit, the "
                   "Markdown summary and the exit code of the worst build", summary)
    add("schema", "print the JSON Schema of the pipeline file or the report", schema)
    return top


def _build_arguments(b: argparse.ArgumentParser) -> None:
    """edgeconv build's arguments."""
    _arg(b, "pipelines", type=str, nargs="+", metavar="PIPELINE",
         help="pipeline file(s) (pipeline.yaml); a quoted glob ('models/*.yaml') is expanded"
    ).completer = _files(".yaml", ".yml")
    b.add_argument("--out", type=Path, help="output folder (default: output.dir of the pipeline; one pipeline only)")
    b.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                   help="build N pipelines at a time, each in its own process (default 1)")
    b.add_argument("--junit", type=Path, metavar="PATH",
                   help="write JUnit XML: a test case per pipeline and target, and per gate")
    b.add_argument("--results-json", type=Path, metavar="PATH",
                   help="write each pipeline's result as JSON: pipeline, exit code, verdict, report folder and report, "
                        "the shard; `edgeconv summary` merges the files of a job matrix")
    b.add_argument("--shard", metavar="K/N",
                   help="build only shard K of N of the pipelines (a CI matrix job; a pipeline's shard depends on "
                        "its path and N alone), then merge the jobs' --results-json with `edgeconv summary`")
    b.add_argument("--summary", type=Path, metavar="PATH",
                   help="write a Markdown summary (a PR comment); on GitHub Actions it is also appended to "
                        "$GITHUB_STEP_SUMMARY")
    b.add_argument("--baseline", type=Path, metavar="REPORT",
                   help="an earlier report.json (or its output folder): the report says what changed, and the "
                        "regression gates (gates.max_size_growth, no_new_fallback, ...) can fail the build")
    b.add_argument("--no-cache", action="store_true",
                   help="build even when the cache holds this build (also: EDGECONV_NO_CACHE=1)")
    b.add_argument("--cache-dir", metavar="DIR|URL",
                   help="build cache folder, or a remote one shared by CI jobs (s3://bucket/prefix, gs://...; "
                        "pip install 'edgeconv[remote-cache]') (default: $EDGECONV_CACHE_DIR, else ~/.cache/edgeconv)")
    b.add_argument("--repair", action="store_true",
                   help="when the agreement or accuracy gates fail, search for the cheapest quantization change "
                        "every target runs that passes them, and build with it (as repair.enabled)")
    b.add_argument("--suggest-keep-float", action="store_true",
                   help="try keeping the layers that add the most quantization error in float, one more at a time, "
                        "until the parity gates pass (as verify.suggest_keep_float)")


def _check_arguments(c: argparse.ArgumentParser) -> None:
    """edgeconv check's arguments."""
    _arg(c, "model", type=Path, help=".tflite file, or .onnx file (ops listed, custom domains and ops "
         "ONNX does not define flagged; no target rules for ONNX yet)"
    ).completer = _files(".tflite", ".onnx")
    _arg(c, "--target", action="append", dest="targets", metavar="NAME",
         help="target name (repeatable; default generic-int8)"
    ).completer = _target_names
    c.add_argument("--format", choices=("text", "json", "md"), default="text")
    c.add_argument("--max-cpu-fallback", type=int, metavar="N",
                   help="fail (exit 1) when more than N ops of a target fall back to the CPU")
    c.add_argument("--min-mac-share", type=float, metavar="F",
                   help="fail when less than this share (0..1) of the MACs runs supported on a target")
    c.add_argument("--fail-on-warnings", action="store_true", help="fail when a target reports a warning")
    _arg(c, "--reference-inputs", type=Path, metavar="X.npz",
         help="compare each target's runtime here (XNNPACK, LiteRT's optimized kernels, TFLite Micro) with "
         "edgeconv's reference on the first 8 samples of X.npz, op by op (as `edgeconv reference` reads it)"
         ).completer = _files(".npz")
    c.add_argument("--max-drift-lsb", type=int, metavar="N",
                   help="with --reference-inputs: fail when a runtime is more than N LSB from the reference")


def _diff_arguments(d: argparse.ArgumentParser) -> None:
    """edgeconv diff's arguments."""
    d.add_argument("old", type=Path, help="baseline report.json, or the output folder holding it")
    d.add_argument("new", type=Path, help="new report.json, or the output folder holding it")
    d.add_argument("--format", choices=("text", "json", "md"), default="text")
    d.add_argument("--max-size-growth", type=float, metavar="F",
                   help="fail (exit 1) when the .tflite grew by more than this share of the old size")
    d.add_argument("--max-arena-growth", type=float, metavar="F",
                   help="fail when the tensor-arena estimate grew by more than this share")
    d.add_argument("--max-accuracy-regression", type=float, metavar="F",
                   help="fail when the built model's accuracy fell by more than F (0..1)")
    _arg(d, "--no-new-fallback", action="append", default=[], metavar="TARGET",
         help="fail when an op type newly falls back or is unsupported on TARGET (repeatable)"
    ).completer = _target_names


def _view_arguments(w: argparse.ArgumentParser) -> None:
    """edgeconv view's arguments."""
    _arg(w, "path", type=Path, metavar="BUILD_DIR|MODEL",
         help="a build's output folder (its report.json, model and explorer/ overlays), or a .tflite "
         "checked now").completer = _files(".tflite")
    _arg(w, "--target", action="append", dest="targets", metavar="NAME",
         help="only this target's overlays (repeatable; default: every target of the build, or "
         "generic-int8 for a .tflite)").completer = _target_names
    w.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    w.add_argument("--port", type=int, default=0, help="port to serve on (default: a free one)")
    w.add_argument("--no-browser", action="store_true", help="print the address; do not open a browser")
