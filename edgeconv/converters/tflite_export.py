"""Convert a frozen graph to a full-integer INT8 .tflite with the TFLite converter.

The converter runs in a child process (``_tflite_worker``, one per build: ``Worker``): on
real models it can abort or segfault (Keras 3 LSTM to full int8 does in TF 2.21), and that
must end as a clear error naming the stage, not as a dead tool. The workers of a process's
builds are forked from a template its first build forked (``_fork_server``).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .. import cancel
from .._log import edgeconv_logger, get_logger
from .._record import record
from .._tf import quiet_tf_env
from ..calibration.samples import Progress, SampleSet
from ..errors import InternalError, ModelError
from ..ir import FrozenGraph, source_layers
from . import _fork_server
from .tf_graph import save_serving_model

if TYPE_CHECKING:
    from ..config import QuantizationConfig

WORKER = "edgeconv.converters._tflite_worker"
EXIT_CONVERTER_ERROR = 2  # the worker's exit code when the converter rejected the model
_LOG_TAIL = 40
_log = get_logger(__name__)


@record
class ExportOptions:
    input_type: str  # "int8" | "uint8" | "int16" | "float32"
    output_type: str
    per_channel: bool
    batch_size: int
    mode: str = "int8"  # int8 | int16x8 | dynamic | float16 | none
    keep_float: tuple[str, ...] = ()  # regexes over op output names left float (int8/int16x8)
    engine: str = "converter"  # converter | ai-edge-quantizer (applied to the float conversion)
    int16_ops: tuple[str, ...] = ()  # regexes over op output names given int16 activations (ai-edge-quantizer)
    range_percentile: float | None = None  # activation ranges at this percentile (ai-edge-quantizer)
    timeout_s: float = 1800.0


@record
class Exported:
    tflite: bytes
    log: str  # the converter's own output, for the log file
    layers: list[dict[str, Any]] | None = None  # per-op quantization error, when asked for
    float_tflite: bytes | None = None  # the same graph converted without quantization, when asked for


def tflite_from_graph(graph: FrozenGraph, calibration: SampleSet, options: ExportOptions,
                      workdir: Path, progress: Progress | None = None) -> Exported:
    """Quantize ``graph`` as ``options`` say, calibrated on exactly ``calibration``'s samples."""
    with Worker() as worker:
        return Converter(graph, workdir, worker).convert(calibration, options, "model", progress)


class Worker:
    """The converter's process for one build. Started early (``start()``), it imports TensorFlow while
    the parent loads the model; then it runs the build's conversions one after the other (the build,
    keep_float trials), so TensorFlow is imported once per worker and a calibration it already made is
    reused. A job that kills it (a converter segfault) ends as a clear error; the next job starts a new
    worker. It lives in its own process group and dies with its parent, even on SIGKILL."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | _Forked | _fork_server.Served | None = None
        self._log: IO[bytes] | None = None
        self._events: queue.Queue[tuple[str, int]] = queue.Queue()
        self._progress: tuple[Progress | None, int] = (None, 0)
        self._froze = False  # a forked worker froze the build's objects (gc.freeze) until the build ends

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._froze:  # the build is over: its objects are the collector's again
            gc.unfreeze()
            self._froze = False

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.close()
        template = _template()  # first: made before this worker's pipe and log, which it must not hold
        env = dict(os.environ)
        quiet_tf_env(env)
        read_fd, write_fd = os.pipe()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (the worker's log, open as long as the worker)
        # Shared with the worker: append mode, so its writes land at the end whatever offset this process
        # reads the log at.
        fcntl.fcntl(self._log.fileno(), fcntl.F_SETFL, fcntl.fcntl(self._log.fileno(), fcntl.F_GETFL) | os.O_APPEND)
        self._events = queue.Queue()
        if template is not None:
            self._froze, template.froze = self._froze or template.froze, False  # the build that made it lifts it
            try:
                self._proc = template.worker(self._log.fileno(), write_fd)
            except OSError as exc:  # the template died: this worker, and every later one, is a new interpreter
                _log.debug("the converter's template process is gone (%s)", exc)
        if self._proc is None and can_fork():  # no template (no pidfds): this process forked
            self._proc = _Forked.start(self._log.fileno(), write_fd)
            self._froze = self._froze or self._proc.froze
        elif self._proc is None:
            isolated_path(env)
            self._proc = subprocess.Popen([sys.executable, "-P", "-m", WORKER, "--serve", str(write_fd)],
                                          stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                          pass_fds=(write_fd,), start_new_session=True, preexec_fn=_die_with_parent)
        os.close(write_fd)
        threading.Thread(target=self._listen, args=(os.fdopen(read_fd), self._events), daemon=True).start()

    def _listen(self, pipe: IO[str], events: queue.Queue[tuple[str, int]]) -> None:
        """The worker's messages: ``N`` samples calibrated (to ``progress``, at most twice a second) and
        ``exit RC`` when a job ends; end of file when the worker is gone."""
        last = 0.0
        with pipe:
            for line in pipe:
                if line.startswith("exit "):
                    events.put(("exit", int(line.split()[1])))
                    continue
                done = int(line.split()[0])
                progress, total = self._progress
                if progress is not None and (time.monotonic() - last > 0.5 or done >= total):
                    progress("calibrating", done, total)
                    last = time.monotonic()
        events.put(("gone", 0))

    def run(self, job_dir: Path, total: int, progress: Progress | None, timeout_s: float) -> tuple[int, str]:
        """Run one job; its exit code (negative: the signal that killed the worker) and its log."""
        cancel.check()
        self.start()
        assert self._proc is not None and self._proc.stdin is not None and self._log is not None
        self._progress = (progress, total)
        give_back_memory()  # this process waits while the worker converts: only what it uses stays resident
        offset = self._log.seek(0, os.SEEK_END)
        try:
            self._proc.stdin.write(f"{job_dir}\n".encode())
            self._proc.stdin.flush()
            kind, code = self._events.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise InternalError("convert", f"the TFLite converter did not finish within {timeout_s:.0f} s") from None
        except BrokenPipeError:  # it died before the job reached it
            kind, code = "gone", 0
        except BaseException:  # interrupted or terminated: the worker and what it started go too
            self.close()
            raise
        finally:
            self._progress = (None, 0)
        if kind == "gone":
            code = self._proc.wait()
        self._log.seek(offset)
        log = self._log.read().decode(errors="replace")
        for line in log.splitlines():  # the converter's own lines (TensorFlow's warnings): -v shows them
            if line.strip():
                _log.debug("converter: %s", line)
        if kind == "gone" or code not in (0, EXIT_CONVERTER_ERROR):
            self.close()  # its state is unknown: the next job gets a new worker
        return code, log

    def close(self) -> None:
        if self._proc is not None:
            _kill_group(self._proc)
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


class Converter:
    """Conversions of one graph: saved once as a SavedModel, converted as often as needed
    (the build, the float reference, keep_float trials) by the build's worker process."""

    def __init__(self, graph: FrozenGraph, workdir: Path, worker: Worker, graph_fn: Any = None) -> None:
        """``graph_fn``: the graph's concrete function when the caller made one (else it is made here)."""
        self.graph, self.workdir, self.worker = graph, workdir, worker
        workdir.mkdir(parents=True, exist_ok=True)
        save_serving_model(graph, workdir / "saved_model", graph_fn)

    def convert(self, calibration: SampleSet, options: ExportOptions, label: str,
                progress: Progress | None = None, debug: SampleSet | None = None,
                float_reference: bool = False) -> Exported:
        """One conversion. The worker streams the samples from the spool files, one batch at a
        time, and reports each calibration step on a pipe; ``progress`` hears about them. With
        ``debug``, the worker also measures the error each quantized op adds on those samples
        (TF's QuantizationDebugger, on the same calibration); with ``float_reference`` it also
        converts the graph without quantization."""
        return _run_worker(self.worker, self.graph, self.workdir, calibration, options, label, progress, debug,
                           float_reference)


def _spool_json(data: SampleSet) -> list[dict[str, object]]:
    return [{"name": i.name, "shape": list(i.shape[1:]), "dtype": i.dtype, "file": str(data.spool_file(k))}
            for k, i in enumerate(data.inputs)]


def _run_worker(worker: Worker, graph: FrozenGraph, workdir: Path, calibration: SampleSet, options: ExportOptions,
                label: str, progress: Progress | None, debug: SampleSet | None,
                float_reference: bool = False) -> Exported:
    job_dir = workdir / label
    job_dir.mkdir(parents=True, exist_ok=True)
    job = {
        "saved_model": str(workdir / "saved_model"),
        "inputs": _spool_json(calibration),
        "count": calibration.count,
        "batch_size": options.batch_size,
        "input_type": options.input_type,
        "output_type": options.output_type,
        "per_channel": options.per_channel,
        "mode": options.mode,
        "keep_float": list(options.keep_float),
        "engine": options.engine,
        "int16_ops": list(options.int16_ops),
        "range_percentile": options.range_percentile,
        "debug": None if debug is None else {"inputs": _spool_json(debug), "count": debug.count},
        "float_reference": float_reference,
    }
    (job_dir / "job.json").write_text(json.dumps(job))
    returncode, log = worker.run(job_dir, calibration.count, progress, options.timeout_s)
    workdir = job_dir
    if returncode == 0:
        layers = json.loads((workdir / "layers.json").read_text()) if (workdir / "layers.json").exists() else None
        float_file = workdir / "float.tflite"
        return Exported((workdir / "model.tflite").read_bytes(), log, layers,
                        float_file.read_bytes() if float_file.exists() else None)
    if returncode == EXIT_CONVERTER_ERROR and (workdir / "error.json").exists():
        error = json.loads((workdir / "error.json").read_text())
        if error["type"] == "pattern":
            raise ModelError(error["message"])
        flex = sorted(set(re.findall(r"\bFlex(\w+)", error["message"])))
        if flex:
            raise ModelError(_flex_message(graph, flex))
        raise ModelError(f"{error.get('by', 'the TFLite converter')} rejected the model ({error['type']}): "
                         f"{error['message']}")
    if returncode < 0:
        name = signal.Signals(-returncode).name
        hint = _crash_hint(graph)
        if hint:  # a known limitation of the converter on this model: the model's to change, not a bug of ours
            raise ModelError(f"the TFLite converter crashed ({name}) while converting the model{hint}")
        raise InternalError("convert", f"the TFLite converter crashed ({name}) while converting the model",
                            log=_tail(log))
    raise InternalError("convert", f"the converter process failed with exit code {returncode}",
                        log=_tail(log))


def give_back_memory() -> None:
    """Collect this process's garbage and return the freed heap to the system (Linux): what loading and
    tracing a model leaves (cyclic garbage glibc would otherwise keep mapped) is not resident while the
    worker converts. The build's process tree peaked at 1,452 MiB PSS on MobileNetV2 1.0 @ 224 without
    it, 1,158 with it (0.06 s)."""
    gc.collect()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(AttributeError):  # not glibc (musl has no malloc_trim)
            ctypes.CDLL(None).malloc_trim(0)


def can_fork() -> bool:
    """Whether the worker can be this process forked: TensorFlow is imported here (the child needs no
    import of its own: one import per build), its runtime has not started (no TensorFlow thread pool
    or session whose locks a fork could copy held) and no other Python thread runs (a lock another
    thread holds at the fork would never be released in the child). A worker started later in a build
    (one replacing a dead worker) is a new interpreter. ``EDGECONV_WORKER=spawn`` forces that too."""
    if not (sys.platform.startswith("linux") and "tensorflow" in sys.modules and threading.active_count() == 1
            and os.environ.get("EDGECONV_WORKER", "fork") != "spawn"):
        return False
    try:
        from tensorflow.python.eager import context
    except ImportError:
        return False
    started = context.context_safe()
    return started is None or not getattr(started, "_initialized", True)


class _Forked:
    """The worker as a fork of this process, after TensorFlow's import and before any TensorFlow runtime
    starts (the build forks it before loading the model): what of ``subprocess.Popen`` the Worker uses."""

    def __init__(self, pid: int, stdin: IO[bytes], froze: bool) -> None:
        self.pid, self.stdin, self.froze = pid, stdin, froze
        self.returncode: int | None = None

    @classmethod
    def start(cls, log_fd: int, message_fd: int) -> _Forked:
        jobs_read, jobs_write = os.pipe()
        # Every object so far (after the TensorFlow import: about 330,000) frozen; the build lifts it when it
        # ends (Worker.__exit__).
        pid, froze = _fork_server.frozen_fork()
        if pid == 0:  # the worker: never returns into the build
            os.close(jobs_write)
            _become_worker(jobs_read, log_fd, message_fd)
        os.close(jobs_read)
        return cls(pid, os.fdopen(jobs_write, "wb"), froze)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


def _become_worker(jobs_fd: int, log_fd: int, message_fd: int) -> None:
    """In a process forked after TensorFlow's import: become the converter worker, reading job folders from
    ``jobs_fd``, writing its output to ``log_fd`` and its messages to ``message_fd``; never returns."""
    code = 1
    try:
        os.setsid()
        _die_with_parent()
        _name_process(b"edgeconv-worker")
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.dup2(jobs_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        for fd in {jobs_fd, log_fd} - {0, 1, 2}:
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdin
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        edgeconv_logger().handlers.clear()  # the build's console is not the worker's
        import faulthandler

        faulthandler.enable(file=sys.stderr)  # a crash's Python stack in the worker's log, not on the build's stderr
        from . import _tflite_worker

        code = _tflite_worker.serve(message_fd)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _template() -> _fork_server.ForkServer | None:
    """The template the workers of this process's builds are forked from (see ``_fork_server``): made by
    the first build that can fork (unless it is the process's last), used by every later one; None where
    there is none (no fork possible, or ``EDGECONV_WORKER=spawn``)."""
    global _TEMPLATE
    if os.environ.get("EDGECONV_WORKER", "fork") == "spawn":
        return None
    if _TEMPLATE is not None:
        if _TEMPLATE.usable():
            return _TEMPLATE
        _TEMPLATE = None  # gone, or this process's parent's (a process ``build -j`` forked)
    if _fork_server.last_build_running() or not can_fork() or not _fork_server.supported():
        return None  # the process's last build makes none: its worker is this process forked
    _TEMPLATE = _fork_server.ForkServer.start(_become_worker, _prepare_template)
    atexit.register(_TEMPLATE.close)
    return _TEMPLATE


def prepare_builds() -> bool:
    """Import TensorFlow and fork the converter workers' template now: for a program that calls
    ``edgeconv.build`` several times and starts TensorFlow's runtime itself first (building or running a
    Keras model does), after which no worker can be forked from it and each build's would be a new
    interpreter importing TensorFlow again. True when a template runs; False where workers cannot be forked
    (not Linux, no pidfds, TensorFlow's runtime already started, another thread running,
    ``EDGECONV_WORKER=spawn``)."""
    from .._tf import import_tf

    import_tf()
    return _template() is not None


def _prepare_template() -> None:
    _die_with_parent()
    _name_process(b"edgeconv-forker")


_TEMPLATE: _fork_server.ForkServer | None = None


def _name_process(name: bytes) -> None:
    """What ``ps``, ``top`` and /proc/PID/comm show for this process (Linux, 15 bytes at most)."""
    import ctypes

    _prctl(15, ctypes.c_char_p(name[:15]))  # PR_SET_NAME


def _die_with_parent() -> None:
    """In the worker, before it runs: the kernel sends it SIGKILL when edgeconv dies (Linux)."""
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _prctl(option: int, value: object) -> None:
    """Linux's prctl(2) for this process; nothing elsewhere."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def isolated_path(env: dict[str, str]) -> None:
    """For a Python started with ``-P`` (its working directory, a pull request's files, is not on its path):
    the folder edgeconv itself is imported from goes on PYTHONPATH, so a source checkout still finds it."""
    home = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([home, *filter(None, [env.get("PYTHONPATH")])])


def _kill_group(proc: subprocess.Popen[bytes] | _Forked | _fork_server.Served) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _crash_hint(graph: FrozenGraph) -> str:
    loops = [n.name for n in graph.graph_def.node if n.op in ("While", "StatelessWhile")]
    if not loops:
        return ""
    layers = sorted({layer for name in loops for layer in source_layers(name, graph.layer_names())})
    classes = {layer.name: layer.class_name for layer in graph.layers}
    where = ", ".join(f"{classes[n]} {n!r}" for n in layers) or "a while loop"
    return (f"; the graph holds a while loop ({where}): full-int8 conversion of Keras 3 recurrent layers is "
            "known to crash TF 2.21's converter; unrolling them (unroll=True) avoids the loop")


def _flex_message(graph: FrozenGraph, tf_ops: list[str]) -> str:
    """Name the TF ops without a TFLite builtin, and the layers they come from."""
    found = []
    for op in tf_ops:
        layers = sorted({layer for n in graph.graph_def.node if n.op == op
                         for layer in source_layers(n.name, graph.layer_names())})
        found.append(f"{op} (layer {', '.join(repr(x) for x in layers)})" if layers else op)
    return (f"the model uses TensorFlow op(s) with no TFLite builtin: {', '.join(found)}. They would run as Flex "
            "ops, which INT8 calibration cannot execute and edge runtimes do not ship. Fix: rewrite them with "
            "ops TFLite supports, or move them out of the model")


def _tail(log: str) -> str:
    return "\n".join(log.splitlines()[-_LOG_TAIL:])


_SHARED_WORKER: Worker | None = None  # while sharing_worker() runs: the converter worker its builds share


def shared_worker() -> Worker | None:
    """The converter worker the builds running now share, if any (see :func:`sharing_worker`)."""
    return _SHARED_WORKER


@contextlib.contextmanager
def sharing_worker() -> Iterator[None]:
    """The builds run inside share one converter worker (the builds of several pipelines, one after the
    other in a process): forked from the first build right after its TensorFlow import, it serves every
    later build too, so TensorFlow is imported once for them all (a later build would otherwise find
    TensorFlow's runtime started and start its worker as a new interpreter that imports it again). A build
    whose conversion kills it gets a new one, as within a build."""
    global _SHARED_WORKER
    if _SHARED_WORKER is not None:
        yield
        return
    with Worker() as worker:
        _SHARED_WORKER = worker
        try:
            yield
        finally:
            _SHARED_WORKER = None


def export_options(q: QuantizationConfig, batch: int) -> Any:
    """What the converter worker is asked for, from the pipeline's quantization section."""
    return ExportOptions(q.io("input").value, q.io("output").value, q.per_channel, batch, mode=q.mode.value,
                         keep_float=q.keep_float, engine=q.engine.value, int16_ops=q.int16_ops,
                         range_percentile=q.range_percentile)
