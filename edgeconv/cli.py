"""Command line: parse arguments, call the library, map outcomes to exit codes.

Exit codes: 0 every target and gate passes; 1 built/checked but a target or gate
fails; 2 a user mistake (config, model, data, file), one clear message; 3 an
internal error, with a traceback in a log file.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import shutil
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import cancel
from ._version import __version__
from .console import print_lines
from .errors import EdgeconvError, rel
from .exit_codes import Exit

EXIT_OK, EXIT_GATE, EXIT_USER, EXIT_INTERNAL = Exit.OK, Exit.GATE, Exit.USER, Exit.INTERNAL


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgeconv",
        description="Convert TensorFlow/Keras models to gated INT8 .tflite for edge targets.",
        epilog="Exit codes: 0 pass, 1 a target or gate fails, 2 usage/config/model/data error, 3 internal error.")
    parser.add_argument("--version", action="version", version=f"edgeconv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # -q and -v on every command (after the command: `edgeconv check -q model.tflite`).
    common = argparse.ArgumentParser(add_help=False)
    loudness = common.add_argument_group("console").add_mutually_exclusive_group()
    loudness.add_argument("-q", "--quiet", action="store_true",
                          help="print only the result: no progress, no log lines (errors still go to stderr)")
    loudness.add_argument("-v", "--verbose", action="store_true",
                          help="also print debug lines, and the log lines of the tools edgeconv runs "
                               "(TensorFlow, LiteRT, Model Explorer) that are otherwise kept out")

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    _build_arguments(command("build", help="run pipelines: convert, quantize, check, write the output folders"))

    v = command("validate", help="validate pipeline files (no TensorFlow needed)")
    pipelines = _arg(v, "pipelines", type=Path, nargs="+", metavar="PIPELINE")
    pipelines.completer = _files(".yaml", ".yml")

    _check_arguments(command("check", help="check a .tflite against targets, or list an .onnx model's ops (no "
                                            "TensorFlow needed)"))

    _diff_arguments(command("diff", help="what changed between two builds (two report.json files or output "
                                          "folders)"))

    t = sub.add_parser("targets", help="list the built-in targets or show one target's rules")
    tsub = t.add_subparsers(dest="action", required=True)
    tsub.add_parser("list", parents=[common], help="list built-in targets")
    show = tsub.add_parser("show", parents=[common],
                           help="print a target's rules as text, each rule once with the ops it applies to")
    _arg(show, "name").completer = _target_names
    _arg(show, "--op", metavar="NAME", help="only the rules of this op (e.g. CONV_2D), with their full ids"
    ).completer = _op_names

    p = sub.add_parser("passes", help="list the graph passes")
    p.add_subparsers(dest="action", required=True).add_parser("list", parents=[common], help="list passes")

    _view_arguments(command("view", help="open a build (or a .tflite) in Model Explorer with each target's verdict "
                                          "and the per-op quantization error on the graph (needs the view extra)"))

    s = command("schema", help="print the JSON Schema of the pipeline file or the report")
    s.add_argument("which", choices=("pipeline", "report"))
    return parser


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
                   help="write each pipeline's result as JSON: pipeline, exit code, verdict, report folder")
    b.add_argument("--summary", type=Path, metavar="PATH",
                   help="write a Markdown summary (a PR comment); on GitHub Actions it is also appended to "
                        "$GITHUB_STEP_SUMMARY")
    b.add_argument("--baseline", type=Path, metavar="REPORT",
                   help="an earlier report.json (or its output folder): the report says what changed, and the "
                        "regression gates (gates.max_size_growth, no_new_fallback, ...) can fail the build")
    b.add_argument("--no-cache", action="store_true",
                   help="build even when the cache holds this build (also: EDGECONV_NO_CACHE=1)")
    b.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="build cache folder (default: $EDGECONV_CACHE_DIR, else ~/.cache/edgeconv)")
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


Terminated = cancel.Terminated
_terminate = cancel.on_sigterm
_interrupt = cancel.on_sigint


def program() -> int:
    """The ``edgeconv`` command (``python -m edgeconv`` too): :func:`main`, then, when the command imported
    TensorFlow, its objects (about 330,000) are left out of the garbage collections of the interpreter's
    exit (``gc.freeze``): they took 0.6 s after every build, which has written and closed all it writes by
    then; the exit still runs its handlers and flushes the console. Not in :func:`main`: a host program
    or test that calls it goes on with its collector whole.

    Descriptors 0-2 a parent closed are opened on /dev/null first, and the console is flushed last, so
    neither a closed descriptor nor a failed final flush can turn the verdict into another exit code."""
    from .console import quiet_exit_streams, standard_descriptors

    standard_descriptors()
    code = main()
    if "tensorflow" in sys.modules:
        gc.freeze()
    quiet_exit_streams()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    from .console import safe_console

    with safe_console():  # the exit code is the verdict, whatever happens to the console
        return _parse_and_main(argv)


def _parse_and_main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (eval "$(register-python-argcomplete edgeconv)")
        import argcomplete

        argcomplete.autocomplete(parser)  # prints the completions and exits
    args = parser.parse_args(argv)
    # This command's console settings on edgeconv's logger are undone when it returns (a host program, or
    # a test calling main(), keeps its own).
    logger = logging.getLogger("edgeconv")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        return _signals_and_main(args)
    finally:
        logger.handlers, logger.propagate = saved[0], saved[2]
        logger.setLevel(saved[1])


def _signals_and_main(args: argparse.Namespace) -> int:
    import signal

    if threading.current_thread() is not threading.main_thread():
        return _main(args)
    cancel.clear()
    previous = signal.signal(signal.SIGTERM, _terminate)
    # Ctrl-C as Python does it, unless it is ignored (a job started in the background) or handled by a host.
    interrupt = signal.getsignal(signal.SIGINT)
    if interrupt is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)
    try:
        return _main(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if interrupt is signal.default_int_handler:
            signal.signal(signal.SIGINT, interrupt)
        cancel.clear()


def _console(args: argparse.Namespace) -> None:
    """-q and -v: edgeconv's own logger for this command (not the root logger: a host program's
    configuration is not ours to change); -v also lets TensorFlow's C++ log lines through."""
    if args.verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
    from .console import LineProgress

    logger = logging.getLogger("edgeconv")
    logger.propagate = False
    logger.handlers = [LineProgress(sys.stderr).handler()]
    logger.setLevel(logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING)


def _main(args: argparse.Namespace) -> int:
    from .output import committed

    committed().clear()
    try:
        _console(args)
        if args.command == "build":
            code = _build_many(args)
            cancel.check()  # a signal whose exception a library swallowed: still a cancelled run
            return code
        if args.command == "validate":
            return _validate(args.pipelines, quiet=args.quiet)
        if args.command == "check":
            return _check(args)
        if args.command == "diff":
            return _diff(args)
        if args.command == "targets":
            return _targets(args)
        if args.command == "passes":
            from .passes import PASSES

            for name, cls in sorted(PASSES.items()):
                print(f"{name}: {cls.summary}")
                for field in dataclasses.fields(cls):  # type: ignore[arg-type]
                    print(f"    option {field.name}: {field.metadata.get('doc', '')}")
            return EXIT_OK
        if args.command == "schema":
            return _schema(args.which)
        if args.command == "view":
            return _view(args)
        raise AssertionError(args.command)
    except EdgeconvError as exc:
        for line in str(exc).splitlines():
            print(f"edgeconv: error: {line}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        print(f"edgeconv: interrupted; {_what_was_written()}", file=sys.stderr)
        return Exit.INTERRUPTED
    except Terminated:
        print(f"edgeconv: terminated; {_what_was_written()}", file=sys.stderr)
        return Exit.TERMINATED
    except Exception as exc:  # a bug, or the toolchain failing: traceback to a log
        return _crash(exc)


def _what_was_written() -> str:
    """What a stopped command leaves: the output folders it finished replacing, or none changed."""
    from .output import committed

    done = committed()
    if not done:
        return "the previous output is unchanged"
    return f"the new output is in place in {', '.join(rel(p) for p in done)} (written before the stop)"


def _crash(exc: Exception) -> int:
    """A bug, or the toolchain failing: one line, and the traceback in a log outside every output folder."""
    from .crash import crash_log, crash_words

    _say_crash(crash_words(exc), crash_log(exc))
    return EXIT_INTERNAL


def _say_crash(what: str, log: Path) -> None:
    print(f"edgeconv: internal error: {what}", file=sys.stderr)
    print(f"edgeconv: traceback written to {rel(log)}; please report it", file=sys.stderr)


def _build_many(args: argparse.Namespace) -> int:
    """Build one or more pipelines (edgeconv.many); print each result, then (for several) one table; CI
    outputs."""
    from .ci import summary_markdown, worst
    from .many import BuildOptions, build_many, expand

    paths = expand(args.pipelines)
    if args.out is not None and len(paths) > 1:
        raise EdgeconvError(f"--out applies to one pipeline; {len(paths)} were given (each writes its output.dir)")
    if args.jobs < 1:
        raise EdgeconvError(f"-j must be at least 1, got {args.jobs}")
    from .ci import check_destinations, write_outputs

    check_destinations(args.junit, args.summary, args.results_json)
    options = BuildOptions(out=args.out, baseline=args.baseline, no_cache=args.no_cache, cache_dir=args.cache_dir,
                           suggest_keep_float=args.suggest_keep_float, repair=args.repair, verbose=args.verbose)
    if len(paths) == 1:
        outcomes = [_build_single(paths[0], options, quiet=args.quiet)]
    else:
        outcomes = build_many(paths, options, jobs=args.jobs, on_outcome=_print_outcome)
        print()
        print(summary_markdown(outcomes).rstrip())
    for line in write_outputs(outcomes, junit=args.junit, summary=args.summary, results_json=args.results_json):
        print(line)
    return worst(outcomes)


def _build_single(path: Path, options: Any, *, quiet: bool) -> Any:
    """One pipeline, with its progress on stderr (not with -q), its errors and its result."""
    from .cache import default_dir
    from .console import make_display
    from .many import build_one

    outcome, result = build_one(path, options, None if quiet else make_display(sys.stderr))
    if outcome.crash_log is not None:
        _say_crash((outcome.error or "").removeprefix("internal error: "), outcome.crash_log)
    elif result is None:
        for line in (outcome.error or "").splitlines():
            print(f"edgeconv: error: {line}", file=sys.stderr)
    else:
        from .report import console_lines

        cached = ([f"cache: unchanged since the cached build; artifacts and report from "
                   f"{rel(options.cache_dir or default_dir())}"] if result.cached else [])
        print_lines([*cached, *console_lines(result.report),
                     f"model {rel(result.tflite_path)}, report {rel(result.output_dir / 'report.md')}"], sys.stdout)
    return outcome


def _print_outcome(o: Any) -> None:
    from .exit_codes import WORDS as EXIT_WORDS

    if o.crash_log is not None:
        _say_crash((o.error or "").removeprefix("internal error: "), o.crash_log)
    where = f" -> {rel(o.report_dir)}" if o.report_dir else ""
    print_lines([f"{rel(o.pipeline)}: {EXIT_WORDS.get(o.code, o.code).upper()} in {o.seconds:.1f} s{where}"
                 f"{' (cached)' if o.cached else ''}", *(f"  {line}" for line in (o.error or "").splitlines())],
                sys.stdout)


def _validate(paths: Sequence[Path], *, quiet: bool = False) -> int:
    """Every file is checked and every problem printed (a pre-commit hook passes several)."""
    from .config import ModelFormat, load_pipeline

    failed = False
    for path in paths:
        try:
            config = load_pipeline(path)
        except EdgeconvError as exc:
            if len(paths) == 1:
                raise
            for line in str(exc).splitlines():
                print(f"edgeconv: error: {line}", file=sys.stderr)
            failed = True
            continue
        if quiet:
            continue
        fmt = config.model.resolved_format()
        steps = ("an existing .tflite: checks only" if fmt is ModelFormat.TFLITE
                 else f"passes {', '.join(p.name for p in config.passes) or 'none'}")
        print(f"{rel(path)}: valid (model {rel(config.model.path)} ({fmt.value}), targets "
              f"{', '.join(config.targets)}, {steps})")
    return EXIT_USER if failed else EXIT_OK


def _check(args: argparse.Namespace) -> int:
    if args.model.suffix.lower() == ".onnx":
        return _check_onnx(args)
    from .config import GatesConfig
    from .pipeline import check
    from .report import target_lines, targets_markdown

    targets = args.targets or ["generic-int8"]
    gates = GatesConfig(
        max_cpu_fallback_ops={t: args.max_cpu_fallback for t in targets} if args.max_cpu_fallback is not None else {},
        min_supported_mac_share={t: args.min_mac_share for t in targets} if args.min_mac_share is not None else {},
        fail_on_warnings=args.fail_on_warnings)
    from .targets.diagnosis import diagnose

    result = check(args.model, targets, gates)
    data = result.to_json()
    found = diagnose(result.model)
    if args.format == "json":
        print(json.dumps(data, indent=2))
    elif args.format == "md":
        said = [f"**Model:** {found.sentence}", ""] if found is not None else []
        print("\n".join([f"# edgeconv check: {rel(args.model)}", "", *said] + targets_markdown(data)))
    else:
        lines = [f"model: {found.sentence}"] if found is not None and not args.quiet else []
        brief = (found is not None and found.explains_every_op) or args.quiet
        for t in data:
            lines += target_lines(t, per_op=not brief)
        if brief and not args.quiet:
            lines.append("(every op fails an integer target for that reason; per-op details: --format md or json)")
        lines += [f"gate: {reason}" for reason in result.gate["reasons"]]
        print_lines(lines, sys.stdout)
    return result.exit_code


def _diff(args: argparse.Namespace) -> int:
    from .diff import RegressionGates, diff, diff_markdown, load_report, regressions

    gates = RegressionGates(args.max_size_growth, args.max_arena_growth, args.max_accuracy_regression,
                            tuple(args.no_new_fallback))
    changes = diff(load_report(args.old), load_report(args.new))
    failed = regressions(changes, gates)
    if args.format == "json":
        print(json.dumps({**changes, "regressions": failed}, indent=2))
    elif args.quiet and args.format == "text":  # only what fails the diff
        for line in failed:
            print(f"regression: {line}")
    else:
        lines = diff_markdown(changes, failed)
        if args.format == "md":
            lines = [f"# edgeconv diff: {rel(args.old)} -> {rel(args.new)}", "", *lines]
        print("\n".join(lines).rstrip())
    return EXIT_GATE if failed else EXIT_OK


def _check_onnx(args: argparse.Namespace) -> int:
    from .converters.onnx_reader import read_onnx
    from .report import onnx_model_markdown

    for flag, value in (("--target", args.targets), ("--max-cpu-fallback", args.max_cpu_fallback),
                        ("--min-mac-share", args.min_mac_share)):
        if value is not None:
            raise EdgeconvError(f"{flag} applies to .tflite models: there are no target rules for ONNX models yet")
    data = read_onnx(args.model)
    warnings = ([f"custom domain {d}: runs only where that domain's ops are implemented"
                 for d in data["custom_domains"]]
                + [f"op {op} is not defined by ONNX (a converter left it; no runtime knows it)"
                   for op in data["unknown_ops"]])
    if args.format == "json":
        print(json.dumps({**data, "warnings": warnings}, indent=2))
    elif args.format == "md":
        shown = onnx_model_markdown({**data, "warnings": warnings})
        print("\n".join([f"# edgeconv check: {rel(args.model)}", "", *shown]))
    else:
        opsets = ", ".join(f"{k} {v}" for k, v in data["opsets"].items())
        print(f"{rel(args.model)}: ONNX, opset {opsets}, {sum(data['ops'].values())} ops")
        for op, count in data["ops"].items():
            print(f"  {op} x{count}")
        for w in warnings:
            print(f"warning: {w}")
    return EXIT_GATE if warnings and args.fail_on_warnings else EXIT_OK


def _targets(args: argparse.Namespace) -> int:
    from .targets import builtin_target_names, load_target

    if args.action == "list":
        for name in builtin_target_names():
            print(f"{name}: {load_target(name).title}")
        return EXIT_OK
    from .targets.describe import describe

    width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 120))
    print(describe(load_target(args.name), width=width, op=args.op))
    return EXIT_OK


def _view(args: argparse.Namespace) -> int:
    import tempfile

    from . import explorer

    with tempfile.TemporaryDirectory(prefix="edgeconv-view-") as scratch:
        overlays = explorer.overlays_for(args.path, args.targets, Path(scratch))
        port = args.port or explorer.free_port(args.host)

        def ready(address: str) -> None:
            if not args.quiet:
                kept = ("Model Explorer's 'Add per-node data' loads them too" if overlays.kept else
                        "written for this view and removed when it stops; a build keeps them in explorer/")
                print(f"model {rel(overlays.model)}; overlays ({kept}):")
                for f in overlays.files:
                    print(f"  {rel(f)}")
            print(f"Model Explorer: {address}")
            if not args.quiet:
                print("Ctrl-C stops it.")
            sys.stdout.flush()
            if not args.no_browser:
                import webbrowser

                webbrowser.open_new_tab(address)

        try:
            explorer.serve(overlays, args.host, port, ready)
        except KeyboardInterrupt:  # how a viewer is stopped
            print("edgeconv: Model Explorer stopped", file=sys.stderr)
            return EXIT_OK
        except Terminated:
            print("edgeconv: terminated; Model Explorer stopped", file=sys.stderr)
            return Exit.TERMINATED
    return EXIT_OK


def _schema(which: str) -> int:
    if which == "pipeline":
        from .config import pipeline_json_schema_text

        print(pipeline_json_schema_text(), end="")
    else:
        from .report_model import json_schema_text

        print(json_schema_text(), end="")
    return EXIT_OK
