"""Several pipelines in one call, as ``edgeconv build a.yaml b.yaml -j 2`` builds them: a library function.

:func:`build_many` builds each pipeline (one after the other, or N at a time in a process pool) and hands
each :class:`~edgeconv.ci.Outcome` to a callback as it ends; a pipeline's failure (exit 2 or 3) never stops
the others. The builds in one process share one converter worker (:func:`sharing_worker`): TensorFlow is
imported once per process. The pool's processes are this process forked after its one TensorFlow import
where that is safe (Linux, before TensorFlow's runtime or any thread starts), else spawned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import cancel
from ._lazy import lazy_import
from ._log import edgeconv_logger
from ._record import record
from .ci import Outcome
from .crash import crash_log, crash_words
from .errors import EdgeconvError
from .exit_codes import Exit

if TYPE_CHECKING:
    import multiprocessing
    import multiprocessing.context
    import multiprocessing.queues

    from .cache import BuildCache
    from .config import PipelineConfig
    from .console import Display
    from .results import BuildResult
else:  # the pool's: a build of one pipeline (a cached one above all) does not pay for it
    multiprocessing = lazy_import("multiprocessing")


@record
class BuildOptions:
    """What ``edgeconv build`` passes to every build (see :func:`edgeconv.build`)."""

    out: Path | None = None
    baseline: Path | None = None
    no_cache: bool = False
    cache_dir: str | Path | None = None  # a folder or a URL (edgeconv.cache.location)
    cache_access: str | None = None  # a remote cache's access, probed once for all builds (prepare_cache)
    suggest_keep_float: bool = False
    repair: bool = False
    verbose: bool = False  # debug lines on the display of a single build


def expand(patterns: Sequence[str]) -> list[Path]:
    """Pipeline paths from the command line: quoted globs expanded (a glob that matches nothing is an
    error), duplicates dropped, order kept."""
    import glob

    paths: list[Path] = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            found = sorted(glob.glob(pattern, recursive=True))
            if not found:
                raise EdgeconvError(f"{pattern}: no pipeline file matches")
            paths += [Path(p) for p in found]
        else:
            paths.append(Path(pattern))
    return list(dict.fromkeys(paths))


def build_one(path: Path, options: BuildOptions, display: Display | None = None, *, cached_only: bool = False,
              loaded: PipelineConfig | None = None) -> tuple[Outcome | None, BuildResult | None]:
    """One pipeline: its outcome, and the build's result when it built. Its user errors (exit 2) and bugs
    (exit 3, traceback in a crash log) become its outcome, as they would end a single build. ``display``
    shows its progress and log lines; without one, the build prints nothing (the report keeps every
    finding). ``cached_only``: only what needs no TensorFlow (a build served from the cache, a .tflite's
    checks, a user error); (None, None) when the build must run. ``loaded``: the pipeline as this run
    already loaded it from ``path``."""
    from .building import build, from_cache
    from .config import load_pipeline

    start = time.perf_counter()
    try:
        config = loaded if loaded is not None else load_pipeline(path)
        # edgeconv's own logger, set for this build (not the root logger: a host program's or an earlier
        # build's configuration must not decide what this one prints).
        logger = edgeconv_logger()
        logger.propagate = False
        if display is not None:
            logger.handlers = [display.handler()]
            logger.setLevel(logging.DEBUG if options.verbose else logging.INFO)
        else:
            logger.handlers = [logging.NullHandler()]
        cache = None if caching_off(options) else _cache(options)
        try:
            if cached_only:
                if cache is None:
                    return None, None
                result = from_cache(config, out=options.out, suggest_keep_float=options.suggest_keep_float,
                                    cache=cache, baseline=options.baseline, repair=options.repair)
                if result is None:
                    return None, None
            else:
                result = build(config, out=options.out, progress=display,
                               suggest_keep_float=options.suggest_keep_float, cache=cache,
                               baseline=options.baseline, repair=options.repair)
        finally:
            if display is not None:
                display.stop()
    except EdgeconvError as exc:
        return Outcome(path, Exit.USER, time.perf_counter() - start, error=str(exc)), None
    except Exception as exc:  # a bug, or the toolchain failing: traceback to a log
        if cached_only:
            return None, None  # the build in the pool meets it again, and reports it
        return Outcome(path, Exit.INTERNAL, time.perf_counter() - start, error=f"internal error: {crash_words(exc)}",
                       crash_log=crash_log(exc)), None
    return Outcome(path, result.exit_code, time.perf_counter() - start, result.report, result.output_dir,
                   cached=result.cached), result


def caching_off(options: BuildOptions) -> bool:
    return options.no_cache or os.environ.get("EDGECONV_NO_CACHE", "") not in ("", "0")


def _cache(options: BuildOptions) -> BuildCache:
    """The build's cache: a local folder, or a remote one read through a local copy. The remote cache's
    module (and uuid, platform with it: about 10 ms of a cached rebuild) is imported only for a remote one."""
    from .cache import BuildCache, location

    if isinstance(found := location(options.cache_dir), Path):
        return BuildCache(found)
    from .cache_remote import open_cache

    return open_cache(found, options.cache_access)


def prepare_cache(options: BuildOptions) -> tuple[BuildOptions, str | None]:
    """A remote cache probed once for every build of this run: the options carrying what the probe found, and
    the one line to say when the cache cannot be written (hits served, builds not stored) or reached (builds
    uncached). A local cache, or none: unchanged, None."""
    from .cache import default_dir, location

    where = location(options.cache_dir)
    if caching_off(options) or not isinstance(where, str):
        return options, None
    from .cache_remote import RemoteCache

    cache = RemoteCache(where, default_dir())
    access = cache.probe(say=False)
    return dataclasses.replace(options, cache_access=access), cache.note


StageCallback = Callable[[str, str, int, int], None]  # (pipeline, stage, done, total), as a build reports it


def build_many(paths: Sequence[Path], options: BuildOptions, *, jobs: int = 1,
               on_outcome: Callable[[Outcome], None] = lambda outcome: None,
               on_stage: StageCallback | None = None,
               pause: Callable[[], contextlib.AbstractContextManager[None]] | None = None) -> list[Outcome]:
    """Build every pipeline, ``jobs`` at a time, calling ``on_outcome`` as each ends and ``on_stage`` as each
    reports a stage (both in this process, the pipeline named as given); the outcomes in the order of
    ``paths``. ``pause``: stops the drawing thread of whatever shows the stages while a build here forks its
    converter worker (with ``jobs`` 1). Ctrl-C or SIGTERM stops every build (each keeps its previous output)
    and no pipeline not yet started starts. With ``jobs`` > 1, what needs no TensorFlow (builds the cache holds,
    .tflite checks, pipelines with errors) is done here first; the pool, and its TensorFlow import, only start
    for the builds that must run."""
    from .console import StageFeed

    if jobs < 1:
        raise EdgeconvError(f"-j must be at least 1, got {jobs}")
    if jobs == 1 or len(paths) == 1:
        from .converters.tflite_export import sharing_worker

        done = []
        with sharing_worker():
            for path in paths:
                feed = (StageFeed(str(path), lambda event: on_stage(*event), pause=pause)
                        if on_stage is not None else None)
                outcome, _ = build_one(path, options, feed)
                assert outcome is not None
                on_outcome(outcome)
                done.append(outcome)
        return done
    import concurrent.futures

    results: dict[Path, Outcome] = {}
    with _prefetching(paths, options) as loaded:
        for path in paths:
            served, _ = build_one(path, options, cached_only=True, loaded=loaded.get(path))
            if served is not None:
                results[path] = served
                on_outcome(served)
    if len(results) == len(paths):
        return [results[p] for p in paths]
    paths_left = [p for p in paths if p not in results]
    context = pool_context()
    forked = context.get_start_method() == "fork"
    # A SimpleQueue: a pipe written under a lock, no feeder thread (a pool process's build forks its converter
    # worker only while no other thread runs), read here between waits (no thread here either).
    stages = context.SimpleQueue() if on_stage is not None else None
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(paths_left)), mp_context=context,
                                                initializer=_pool_process_init, initargs=(forked, stages)) as pool:
        try:
            with _frozen_while_forking(forked):
                futures = {pool.submit(_build_in_pool, p, options): p for p in paths_left}
            pending = set(futures)
            while pending:
                finished, pending = concurrent.futures.wait(pending, timeout=0.1,
                                                            return_when=concurrent.futures.FIRST_COMPLETED)
                _relay(stages, on_stage)  # the stages so far, the finished pipelines' last ones included
                for future in sorted(finished, key=lambda f: paths.index(futures[f])):
                    results[futures[future]] = outcome = future.result()
                    on_outcome(outcome)
        except BaseException as exc:  # Ctrl-C, SIGTERM or a broken pool: no pipeline not yet started starts now
            if isinstance(exc, (KeyboardInterrupt, cancel.Terminated)):
                _interrupt_children()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return [results[p] for p in paths]


@contextlib.contextmanager
def _prefetching(paths: Sequence[Path], options: BuildOptions) -> Iterator[dict[Path, PipelineConfig]]:
    """A remote cache's entries for every pipeline fetched together (16 requests in flight) while the block
    serves them in order, each as soon as its own entry is in; the pipelines loaded on the way (served from
    these, not loaded again). What the fetching says (a corrupt entry) is logged where it was before the
    block's builds set their own logging, once the block ends."""
    from .building import cache_key
    from .cache import location
    from .config import load_pipeline

    if caching_off(options) or not isinstance(location(options.cache_dir), str):
        yield {}
        return
    from .cache_remote import RemoteCache

    cache = _cache(options)
    assert isinstance(cache, RemoteCache)
    keys, loaded = [], {}
    for path in paths:
        try:
            config = loaded[path] = load_pipeline(path)
            key = cache_key(config, cache=cache, out=options.out, suggest_keep_float=options.suggest_keep_float,
                            baseline=options.baseline, repair=options.repair)
        except Exception:  # a bad pipeline: its build meets the error again and reports it
            continue
        if key is not None:
            keys.append(key)
    logger = edgeconv_logger()
    handlers, notes = list(logger.handlers), []
    try:
        with cache.fetching(keys, lambda *args: notes.append(args)):
            yield loaded
    finally:
        serving = logger.handlers
        logger.handlers = handlers
        try:
            for args in notes:
                logger.warning(*args)
        finally:
            logger.handlers = serving


def _relay(stages: multiprocessing.queues.SimpleQueue[tuple[str, str, int, int]] | None,
           on_stage: StageCallback | None) -> None:
    """Hand every stage report the pool's builds have written so far to ``on_stage``."""
    if stages is None or on_stage is None:
        return
    with contextlib.suppress(EOFError, OSError):
        while not stages.empty():
            on_stage(*stages.get())


_STAGES: multiprocessing.queues.SimpleQueue[tuple[str, str, int, int]] | None = None  # in a pool process


def _build_in_pool(path: Path, options: BuildOptions) -> Outcome:
    from .console import StageFeed

    outcome = build_one(path, options, StageFeed(str(path), _STAGES.put) if _STAGES is not None else None)[0]
    assert outcome is not None
    return outcome


@contextlib.contextmanager
def _frozen_while_forking(forked: bool) -> Iterator[None]:
    """The pool forks all its processes at the first submit: the objects so far (TensorFlow's, about
    330,000) are out of the collector's reach meanwhile, so that no process's collection copies the pages
    they all share (as for the converter worker); this process lifts it once they are started."""
    froze = forked and gc.get_freeze_count() == 0
    if froze:
        gc.freeze()
    try:
        yield
    finally:
        if froze:
            gc.unfreeze()


def _interrupt_children() -> None:
    """This process was interrupted or terminated (a signal to it alone, as a job runner may send): each
    build running in the pool is terminated too (SIGTERM, which each pool process turns into
    ``Terminated``: the build unwinds, removing its staging and work folders and its converter worker,
    and keeps its previous output) instead of running on unseen. Not SIGINT: a job started in the
    background ignores it, and its pool processes inherit that."""
    import signal

    for child in multiprocessing.active_children():
        if child.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)


def _pool_process_init(forked: bool,
                       stages: multiprocessing.queues.SimpleQueue[tuple[str, str, int, int]] | None = None) -> None:
    """In each process of the pool: SIGTERM stops its build cleanly (as in a single build); its builds
    share one converter worker (one TensorFlow import per process, or none for a fork), which ends with
    the process. A forked process forgets the exit handlers it inherited (the parent's to run, not its
    own) and runs those its builds register when it ends (a fork ends without them: TensorFlow's
    autograph removes its generated files from the temporary folder in such handlers)."""
    import atexit
    import signal
    from multiprocessing import util

    global _STAGES
    _STAGES = stages  # where its builds report their stages (None: nobody watches)
    signal.signal(signal.SIGTERM, cancel.on_sigterm)
    if forked:
        atexit._clear()
        util.Finalize(None, atexit._run_exitfuncs, exitpriority=0)
    from .converters.tflite_export import sharing_worker

    sharing = sharing_worker()
    sharing.__enter__()
    util.Finalize(None, sharing.__exit__, args=(None, None, None), exitpriority=10)


def pool_context() -> multiprocessing.context.BaseContext:
    """How ``build -j N`` (N > 1) starts its processes: where a fork is safe (Linux, as for the converter
    worker), TensorFlow is imported here once and each process is this one forked, before anything starts
    TensorFlow's runtime or a thread (the pool forks every process at its first task); each imports
    nothing again and shares TensorFlow's pages with the others. Otherwise (or ``EDGECONV_WORKER=spawn``,
    or TensorFlow missing: each build then reports it) they are new interpreters that import it each."""
    from ._tf import import_tf
    from .converters.tflite_export import can_fork

    if sys.platform.startswith("linux") and os.environ.get("EDGECONV_WORKER", "fork") != "spawn":
        try:
            import_tf()
        except EdgeconvError:
            return multiprocessing.get_context("spawn")
        if can_fork():
            return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")
