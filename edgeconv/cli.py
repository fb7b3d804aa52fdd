"""Command line: parse arguments, call the library, map outcomes to exit codes.

Exit codes: 0 every target and gate passes; 1 built/checked but a target or gate
fails; 2 a user mistake (config, model, data, file), one clear message; 3 an
internal error, with a traceback in a log file.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _log, cancel
from .console import print_lines
from .errors import EdgeconvError, printable, printable_lines, rel
from .exit_codes import Exit

EXIT_OK, EXIT_GATE, EXIT_USER, EXIT_INTERNAL = Exit.OK, Exit.GATE, Exit.USER, Exit.INTERNAL


Terminated = cancel.Terminated
_terminate = cancel.on_sigterm
_interrupt = cancel.on_sigint


def program() -> int:
    """The ``edgeconv`` command (``python -m edgeconv`` too): :func:`main`, then, when the command imported
    TensorFlow, its objects (about 330,000) are left out of the garbage collections of the interpreter's
    exit (``gc.freeze``): they took 0.6 s after every build, which has written and closed all it writes by
    then; the exit still runs its handlers and flushes the console. ``edgeconv check`` runs with the collector
    off (:func:`_command`). Neither is in :func:`main`: a host program or test that calls it goes on with its
    collector whole.

    Descriptors 0-2 a parent closed are opened on /dev/null first, and the console is flushed last, so
    neither a closed descriptor nor a failed final flush can turn the verdict into another exit code.
    argparse's own words are not looked up in translations edgeconv does not ship
    (:func:`edgeconv.arguments.untranslated`), and a check ends as soon as its console is flushed
    (:func:`_end_check`)."""
    from .arguments import untranslated
    from .console import quiet_exit_streams, standard_descriptors

    standard_descriptors()
    untranslated()
    checking = _command(sys.argv[1:]) == "check"
    if checking:
        gc.disable()  # _command: why a check runs without the collector
    code = main()
    if "tensorflow" in sys.modules:
        gc.freeze()
    quiet_exit_streams()
    if checking:
        _end_check(code)  # returns only when the interpreter's exit has more to do than free memory
    return code


def _end_check(code: int) -> None:
    """End the `edgeconv check` process now, with ``code``, when all the interpreter's exit would do is free
    its objects one by one: 7.5 ms of a check of MobileNetV2 against two targets, an eighth of the command
    (scripts/bench_check.py), for memory the OS takes back at once. The console is flushed by then
    (:func:`edgeconv.console.quiet_exit_streams`), and a check writes no file. Returns (and the exit is the
    interpreter's) when anything else is left: an exit handler (``atexit``, which ``weakref.finalize`` and
    ``tempfile`` use; CPython counts them), a thread other than the main one, or a console stream that is not
    the process's own, or a profiler or tracer watching (``python -m cProfile`` prints after the command)."""
    import atexit

    handlers = getattr(atexit, "_ncallbacks", None)  # CPython's; elsewhere the exit is the interpreter's
    threading = sys.modules.get("threading")
    if (handlers is None or handlers() or (threading is not None and threading.active_count() > 1)
            or sys.stdout is not sys.__stdout__ or sys.stderr is not sys.__stderr__
            or sys.getprofile() is not None or sys.gettrace() is not None):
        return
    os._exit(code)


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs, as the parser reads it (the first word, when it is not an option).

    ``edgeconv check`` runs without the garbage collector: it reads one model (and, with
    ``--reference-inputs``, the samples it is given) and exits, and nearly all it makes lives until then. Its
    22 collections on MobileNetV2 against two targets took 3.3 ms, a seventh of what the command adds to
    reading the model, and freed 96 objects (scripts/bench_check.py). A build keeps the collector:
    TensorFlow's graphs hold cycles that must be collected."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def main(argv: Sequence[str] | None = None) -> int:
    from .console import safe_console

    with safe_console():  # the exit code is the verdict, whatever happens to the console
        return _parse_and_main(argv)


def _parse_and_main(argv: Sequence[str] | None) -> int:
    from .arguments import parser as make_parser

    argv = list(sys.argv[1:] if argv is None else argv)
    completing = "_ARGCOMPLETE" in os.environ
    # Only the command being run gets its arguments built (not for --help, --version or completion).
    parser = make_parser(None if completing else _command(argv))
    if completing:  # the shell asks for completions (eval "$(register-python-argcomplete edgeconv)")
        import argcomplete

        argcomplete.autocomplete(parser)  # prints the completions and exits
    args = parser.parse_args(argv)
    with _log.kept():  # this command's console is undone when it returns
        return _signals_and_main(args)


def _signals_and_main(args: argparse.Namespace) -> int:
    import signal

    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (a host program's worker): its signals are the host's
        return _main(args)
    cancel.clear()
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

    _log.console(lambda: LineProgress(sys.stderr).handler(),
                 _log.DEBUG if args.verbose else _log.ERROR if args.quiet else _log.WARNING)


def _main(args: argparse.Namespace) -> int:
    cancel.committed().clear()
    try:
        _console(args)
        if args.command == "build":
            code = _build_many(args)
            cancel.check()  # a signal whose exception a library swallowed: still a cancelled run
            return code
        if args.command == "validate":
            return _validate(args.pipelines, quiet=args.quiet, check_files=not args.no_files)
        if args.command == "check":
            return _check(args)
        if args.command == "diff":
            return _diff(args)
        if args.command == "targets":
            return _targets(args)
        if args.command == "passes":
            from .passes import describe

            print("\n".join(describe()))
            return EXIT_OK
        if args.command == "schema":
            return _schema(args.which)
        if args.command == "cache":
            return _cache(args)
        if args.command == "summary":
            return _summary(args)
        if args.command == "view":
            return _view(args)
        if args.command == "reference":
            return _reference(args)
        raise AssertionError(args.command)
    except EdgeconvError as exc:
        _say_error(str(exc))
        return EXIT_USER
    except KeyboardInterrupt:
        print(f"edgeconv: interrupted; {_what_was_written()}", file=sys.stderr)
        return Exit.INTERRUPTED
    except Terminated:
        print(f"edgeconv: terminated; {_what_was_written()}", file=sys.stderr)
        return Exit.TERMINATED
    except Exception as exc:  # a bug, or the toolchain failing: traceback to a log
        return _crash(exc)


def _say_error(text: str) -> None:
    """A user mistake's message, each line behind ``edgeconv: error: `` (:func:`~edgeconv.errors.printable_lines`)."""
    for line in printable_lines(text):
        print(f"edgeconv: error: {line}", file=sys.stderr)


def _what_was_written() -> str:
    """What a stopped command leaves: the output folders it finished replacing, or none changed."""
    done = cancel.committed()
    if not done:
        return "the previous output is unchanged"
    return f"the new output is in place in {', '.join(rel(p) for p in done)} (written before the stop)"


def _crash(exc: Exception) -> int:
    """A bug, or the toolchain failing: one line, and the traceback in a log outside every output folder."""
    from .crash import crash_log, crash_words

    _say_crash(crash_words(exc), crash_log(exc))
    return EXIT_INTERNAL


def _say_crash(what: str, log: Path) -> None:
    print(f"edgeconv: internal error: {printable(what)}", file=sys.stderr)
    print(f"edgeconv: traceback written to {rel(log)}; please report it", file=sys.stderr)


def _build_many(args: argparse.Namespace) -> int:
    """Build one or more pipelines (edgeconv.many); print each result, then (for several) one table; CI
    outputs."""
    from .ci import worst
    from .many import BuildOptions, expand, prepare_cache
    given = expand(args.pipelines)
    shard = None
    if args.shard is not None:
        from .shards import parse_shard

        shard = parse_shard(args.shard)
    if args.out is not None and len(given) > 1:
        raise EdgeconvError(f"--out applies to one pipeline; {len(given)} were given (each writes its output.dir)")
    if args.jobs < 1:
        raise EdgeconvError(f"-j must be at least 1, got {args.jobs}")
    from .ci import check_destinations, write_outputs

    check_destinations(args.junit, args.summary, args.results_json)
    paths = given
    if shard is not None:
        from .shards import select

        paths = select(given, shard)
        print(f"edgeconv: shard {shard}: {len(paths)} of {len(given)} pipeline{'s' if len(given) > 1 else ''}",
              file=sys.stderr)
    options = BuildOptions(out=args.out, baseline=args.baseline, no_cache=args.no_cache, cache_dir=args.cache_dir,
                           suggest_keep_float=args.suggest_keep_float, repair=args.repair, verbose=args.verbose)
    if paths:
        options, note = prepare_cache(options)
        if note is not None:
            print(f"edgeconv: {note}", file=sys.stderr)
    if not paths:
        outcomes = []
    elif len(paths) == 1:
        outcomes = [_build_single(paths[0], options, quiet=args.quiet)]
    else:
        outcomes = _build_several(paths, options, jobs=args.jobs, quiet=args.quiet)
    results = None
    if args.results_json:
        from .shards import results_document

        results = (args.results_json, results_document(outcomes, given, shard))
    for line in write_outputs(outcomes, junit=args.junit, summary=args.summary, results=results):
        print(line)
    return worst(outcomes)


def _summary(args: argparse.Namespace) -> int:
    """``edgeconv summary RESULTS.json...``: the jobs of a matrix as one verdict (edgeconv.shards.merge): the
    table, JUnit, the Markdown summary, the exit code of the worst build."""
    from .ci import check_destinations, worst, write_outputs
    from .shards import merge

    check_destinations(args.junit, args.summary, None)
    merged = merge(args.results)
    jobs = (f"{merged.files} shard{'s' if merged.files > 1 else ''} of {merged.shards}" if merged.shards
            else "1 job")
    _print_table(merged.outcomes)
    print(f"{len(merged.outcomes)} pipelines from {jobs}; "
          f"{sum(o.cached for o in merged.outcomes)} served from the cache")
    for line in write_outputs(merged.outcomes, junit=args.junit, summary=args.summary):
        print(line)
    return worst(merged.outcomes)


def _build_single(path: Path, options: Any, *, quiet: bool) -> Any:
    """One pipeline, with its progress on stderr (not with -q), its errors and its result."""
    from .cache import location
    from .console import make_display
    from .converters._fork_server import last_build
    from .many import build_one

    with last_build():
        outcome, result = build_one(path, options, None if quiet else make_display(sys.stderr))
    assert outcome is not None
    if outcome.crash_log is not None:
        _say_crash((outcome.error or "").removeprefix("internal error: "), outcome.crash_log)
    elif result is None:
        _say_error(outcome.error or "")
    else:
        from .report import console_lines

        cached = ([f"cache: unchanged since the cached build; artifacts and report from "
                   f"{_where(location(options.cache_dir))}"] if result.cached else [])
        served_in = outcome.seconds if result.cached else None
        print_lines([*cached, *console_lines(result.report, served_in),
                     f"model {rel(result.tflite_path)}, report {rel(result.output_dir / 'report.md')}"], sys.stdout)
    return outcome


def _build_several(paths: Sequence[Path], options: Any, *, jobs: int, quiet: bool) -> list[Any]:
    """Several pipelines: on a terminal a live line per running pipeline with its stage (not with -q); a line
    per pipeline as it ends; then one table, how long it all took, and the TensorFlow import the builds
    shared (in no pipeline's own time)."""
    import time

    from ._tf import import_seconds
    from .console import PipelineLines, live
    from .many import build_many

    # Live lines only where stdout and stderr are the terminal a person watches (rich draws them on stderr
    # and prints stdout's lines above them).
    lines = PipelineLines(sys.stderr) if not quiet and live(sys.stdout) and live(sys.stderr) else None
    start = time.perf_counter()
    try:
        outcomes = build_many(paths, options, jobs=jobs, on_outcome=lambda o: _print_outcome(o, lines),
                              on_stage=lines.stage if lines is not None else None,
                              pause=lines.paused if lines is not None else None)
    finally:
        if lines is not None:
            lines.stop()
    took = time.perf_counter() - start
    print()
    _print_table(outcomes)
    shared = import_seconds()
    imported = (f"; TensorFlow imported once, in {shared:.1f} s, before the builds (in no pipeline's time)"
                if shared is not None and jobs > 1 else "")
    print(f"{len(outcomes)} pipelines in {took:.1f} s, {min(jobs, len(outcomes))} at a time{imported}")
    return outcomes


def _print_table(outcomes: Sequence[Any]) -> None:
    """The table of several pipelines' results, then what failed and why (edgeconv.ci's rows and notes)."""
    from .ci import regressions, summary_notes, summary_rows, worst
    from .console import print_table
    from .exit_codes import WORDS as EXIT_WORDS

    rows = [(row.pipeline, row.result.upper() + (" (cached)" if row.cached else ""), row.size,
             ", ".join(f"{name} {'PASS' if ok else 'FAIL'}" for name, ok in row.targets) or "-", row.parity,
             row.report) for row in summary_rows(outcomes)]
    worse = regressions(outcomes)
    sections = [("Regressions against the baseline", [f"{p}{rest}" for p, rest in worse])] if worse else []
    sections += [(title, [f"{pipeline}{rest}" for pipeline, rest in notes])
                 for title, notes in summary_notes(outcomes)]
    print_table(f"edgeconv: {EXIT_WORDS.get(worst(outcomes), 'crash').upper()}",
                ("pipeline", "result", "size", "targets", "parity", "report"), rows, sections, sys.stdout)


def _print_outcome(o: Any, lines: Any = None) -> None:
    """A pipeline's line as it ends: its result, its time (or the cache's), its output folder, its error."""
    from .exit_codes import WORDS as EXIT_WORDS

    if o.crash_log is not None:
        _say_crash((o.error or "").removeprefix("internal error: "), o.crash_log)
    where = f" -> {rel(o.report_dir)}" if o.report_dir else ""
    took = f", served from the cache in {o.seconds:.1f} s" if o.cached else f" in {o.seconds:.1f} s"
    said = [f"{rel(o.pipeline)}: {EXIT_WORDS.get(o.code, o.code).upper()}{took}{where}",
            *(f"  {line}" for line in (o.error or "").splitlines())]
    if lines is not None:
        lines.ended(str(o.pipeline), said)
    else:
        print_lines(said, sys.stdout)


def _validate(paths: Sequence[Path], *, quiet: bool = False, check_files: bool = True) -> int:
    """Every file is checked and every problem printed (a pre-commit hook passes several); without
    ``check_files`` the model and data files may be absent."""
    from .config import ModelFormat, load_pipeline

    failed = False
    for path in paths:
        try:
            config = load_pipeline(path, check_files=check_files)
        except EdgeconvError as exc:
            if len(paths) == 1:
                raise
            _say_error(str(exc))
            failed = True
            continue
        if quiet:
            continue
        fmt = config.model.resolved_format()
        steps = ("an existing .tflite: checks only" if fmt is ModelFormat.TFLITE
                 else f"passes {', '.join(p.name for p in config.passes) or 'none'}")
        absent = [what for what, p in (("model", config.model.path), *(
            (section, d.path) for section, d in (("calibration data", config.calibration),
                                                 ("evaluation data", config.evaluation)) if d is not None))
            if p is not None and not p.exists()]
        unchecked = f"; not checked, absent: {', '.join(absent)}" if absent else ""
        print(f"{rel(path)}: valid (model {rel(config.model.path)} ({fmt.value}), targets "
              f"{', '.join(config.targets)}, {steps}{unchecked})")
    return EXIT_USER if failed else EXIT_OK


def _check(args: argparse.Namespace) -> int:
    if args.model.suffix.lower() == ".onnx":
        return _check_onnx(args)
    from .check_output import check_lines
    from .checking import check

    targets = args.targets or ["generic-int8"]
    gates = None
    if args.max_cpu_fallback is not None or args.min_mac_share is not None or args.fail_on_warnings:
        from .config import GatesConfig  # the pipeline's schema: imported only when a gate is given

        gates = GatesConfig(
            max_cpu_fallback_ops={t: args.max_cpu_fallback for t in targets} if args.max_cpu_fallback is not None
            else {},
            min_supported_mac_share={t: args.min_mac_share for t in targets} if args.min_mac_share is not None
            else {},
            fail_on_warnings=args.fail_on_warnings)
    if args.max_drift_lsb is not None and args.reference_inputs is None:
        from .errors import ConfigError

        raise ConfigError(["--max-drift-lsb needs --reference-inputs (the samples the runtimes are compared on)"])
    result = check(args.model, targets, gates, reference_inputs=args.reference_inputs,
                   max_drift_lsb=args.max_drift_lsb)
    lines = check_lines(args.model, result, args.format, quiet=args.quiet)
    if args.format == "text":
        print_lines(lines, sys.stdout)  # verdict words in colour on a terminal
    else:
        print("\n".join(lines))
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
            print(f"regression: {printable(line)}")
    else:
        lines = diff_markdown(changes, failed)
        if args.format == "md":
            from . import markdown as md

            lines = [f"# edgeconv diff: {md.text(rel(args.old))} -> {md.text(rel(args.new))}", "", *lines]
        print("\n".join(printable(line) for line in lines).rstrip())
    return EXIT_GATE if failed else EXIT_OK


def _check_onnx(args: argparse.Namespace) -> int:
    from .check_output import onnx_lines, onnx_warnings
    from .converters.onnx_reader import read_onnx

    for flag, value in (("--target", args.targets), ("--max-cpu-fallback", args.max_cpu_fallback),
                        ("--min-mac-share", args.min_mac_share)):
        if value is not None:
            raise EdgeconvError(f"{flag} applies to .tflite models: there are no target rules for ONNX models yet")
    summary = read_onnx(args.model)
    warnings = onnx_warnings(summary)
    text = "\n".join(onnx_lines(args.model, summary, warnings, args.format))
    print(text if args.format == "json" else "\n".join(printable_lines(text)))  # JSON escapes its own
    return EXIT_GATE if warnings and args.fail_on_warnings else EXIT_OK


def _targets(args: argparse.Namespace) -> int:
    from .targets import builtin_target_names, load_target

    if args.action == "list":
        for name in builtin_target_names():
            print(f"{name}: {load_target(name).title}")
        return EXIT_OK
    import shutil

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
                if overlays.verdict:
                    print(overlays.verdict.replace(" ", ": ", 1), *(f"  - {printable(r)}" for r in overlays.reasons),
                          sep="\n")
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

        shown = explorer.titled(overlays, Path(scratch))
        try:
            explorer.serve(overlays, args.host, port, ready, shown)
        except KeyboardInterrupt:  # how a viewer is stopped
            print("edgeconv: Model Explorer stopped", file=sys.stderr)
            return EXIT_OK
        except Terminated:
            print("edgeconv: terminated; Model Explorer stopped", file=sys.stderr)
            return Exit.TERMINATED
    return EXIT_OK


def _reference(args: argparse.Namespace) -> int:
    from . import output, reference
    from .converters.tflite_reader import read_tflite
    from .reference.trace import files, read_inputs

    out = args.out.resolve()
    output.check_not_a_link(args.out)
    output.check_holds_no_input(out, [("model", args.model), ("inputs", args.inputs)])
    model = read_tflite(args.model)
    computed = reference.run(model, read_inputs(args.inputs, model, args.sample))
    output.commit(out, files(model, computed))
    if not args.quiet:
        print(f"{rel(args.model)}: {len(computed.steps)} ops computed by hand; every tensor in "
              f"{rel(out / 'tensors.npz')}, each op's arithmetic in {rel(out / 'trace.md')} and trace.json")
    return EXIT_OK


def _cache(args: argparse.Namespace) -> int:
    """``edgeconv cache stats`` / ``prune --older-than AGE``: the build cache, local or remote, without
    TensorFlow."""
    import time

    from .cache import entries, location, parse_age, prune

    root = location(args.cache_dir)
    where = _where(root)
    if args.action == "prune":
        age = parse_age(args.older_than)
        if isinstance(root, str):
            from .cache_remote import remote_prune

            done: Any = remote_prune(root, age)
        else:
            done = prune(root, age)
        print(f"cache {where}: removed {done.removed} entr{'y' if done.removed == 1 else 'ies'} not used for "
              f"{args.older_than} ({_mib(done.removed_bytes)}); kept {done.kept} ({_mib(done.kept_bytes)})"
              + (f"; removed {done.staging} upload(s) a writer left unpublished" if done.staging else ""))
        return EXIT_OK
    if isinstance(root, str):
        from .cache_remote import remote_entries

        listing = remote_entries(root)
        held: list[Any] = listing.entries
        unnamed = sum(size for size, _ in listing.orphans.values())
        orphans = f"; {len(listing.orphans)} upload(s) no entry names ({_mib(unnamed)})" if listing.orphans else ""
    else:
        held, orphans = entries(root), ""
    if not held:
        print(f"cache {where}: empty{orphans}")
        return EXIT_OK
    now = time.time()
    print(f"cache {where}: {len(held)} entr{'y' if len(held) == 1 else 'ies'}, "
          f"{_mib(sum(e.bytes for e in held))}; last used {_ago(now - held[-1].last_used)} (newest) to "
          f"{_ago(now - held[0].last_used)} (oldest){orphans}")
    return EXIT_OK


def _where(root: str | Path) -> str:
    """A cache's location as the console says it: a URL as given, a folder relative to here."""
    return root if isinstance(root, str) else rel(root)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):,.1f} MiB"


def _ago(seconds: float) -> str:
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f}{unit} ago"
    return "just now"


def _schema(which: str) -> int:
    if which == "pipeline":
        from .config import pipeline_json_schema_text

        print(pipeline_json_schema_text(), end="")
    else:
        from .report_model import json_schema_text

        print(json_schema_text(), end="")
    return EXIT_OK
