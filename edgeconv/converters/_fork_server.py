"""The converter workers of a process's later builds, forked from a template of its first.

A worker can be the build process forked only while TensorFlow's runtime has not started there (see
``tflite_export.can_fork``): true for a process's first build, false for every later one, which then
started its worker as a new interpreter importing TensorFlow again (about 7 s of CPU for each build after
the first, in a program or a test session calling ``edgeconv.build`` in a loop). So the first build forks
a template instead: a process holding TensorFlow imported, no runtime, no thread and nothing of any
model, which lives as long as the build process and forks each worker on request, for this build and
every later one. Each worker is still a process of its own for one build (nothing of an earlier build's
conversions in it), in its own session, killed by the kernel when the template dies, the template when
the build process dies (even on SIGKILL).

The build process and the template talk over a socket pair: the build sends the worker's three
descriptors (its jobs pipe, the log, the message pipe) and reads back the new worker's process id; the
template reports each worker's exit status when it ends (the worker is not the build's child, so only
the template can wait for it).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import socket

_LAST_BUILD = False  # while the process's last build runs (see :func:`last_build`)


@contextlib.contextmanager
def last_build() -> Iterator[None]:
    """The build inside is the last of this process (``edgeconv build`` of one pipeline): it makes no
    template (one made earlier still serves it), its worker is this process forked, as no later build
    would use one. A template holds 20-25 MiB of pages
    of its own once the build writes to what they shared (bench_build's peak PSS of the example and of
    MobileNetV2 0.35)."""
    global _LAST_BUILD
    _LAST_BUILD = True
    try:
        yield
    finally:
        _LAST_BUILD = False


def last_build_running() -> bool:
    return _LAST_BUILD


_FORK = b"fork"
_FDS = 3  # the worker's jobs pipe (read end), its log, its message pipe (write end)


class Served:
    """A worker the template forked: what of ``subprocess.Popen`` the Worker uses."""

    def __init__(self, server: ForkServer, pid: int, stdin: IO[bytes]) -> None:
        self._server, self.pid, self.stdin = server, pid, stdin
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, block=False)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, block=True)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """The template process, seen from the build process that forked it."""

    def __init__(self, pid: int, sock: socket.socket, froze: bool) -> None:
        self.pid, self._sock = pid, sock
        self.froze = froze  # it froze the build's objects: the first build it serves lifts that when it ends
        self._owner = os.getpid()  # a process forked from this one (``build -j``) has no use of it
        self._exited: dict[int, int] = {}
        self._forked: list[int] = []
        self._lock = threading.Lock()

    @classmethod
    def start(cls, become_worker: Callable[[int, int, int], None], prepare: Callable[[], None]) -> ForkServer:
        """Fork the template. ``become_worker(jobs_fd, log_fd, message_fd)`` turns a process it forked into
        a worker (never returns); ``prepare()`` runs in the template first (its process name and the like)."""
        import socket

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid, froze = frozen_fork()  # the build lifts the freeze when it ends; the template and its workers keep it
        if pid == 0:  # the template: never returns into the build
            code = 1
            try:
                ours.close()
                _let_go(keep=theirs.fileno())
                os.setsid()  # a terminal's Ctrl-C is the build's to handle, not the template's
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                prepare()
                code = _serve(theirs, become_worker)
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        theirs.close()
        return cls(pid, ours, froze)

    def usable(self) -> bool:
        """Whether this process may ask the template for workers (it made it, and it runs)."""
        if os.getpid() != self._owner or self._sock.fileno() < 0:
            return False
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid = self.pid
        if pid:
            self.close()
        return not pid

    def worker(self, log_fd: int, message_fd: int) -> Served:
        """A new worker, reading its jobs from the returned ``stdin``. OSError when the template is gone."""
        import socket

        jobs_read, jobs_write = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self._sock, [_FORK], [jobs_read, log_fd, message_fd])
                while not self._forked:
                    self._receive()
                pid = self._forked.pop(0)
        except OSError:
            os.close(jobs_write)
            self.close()
            raise
        finally:
            os.close(jobs_read)
        return Served(self, pid, os.fdopen(jobs_write, "wb"))

    def exit_code(self, pid: int, block: bool) -> int | None:
        """A worker's exit code as ``subprocess`` has it (negative: the signal that ended it), None while it
        runs (``block=False``). A worker whose template died died with it (SIGKILL, from the kernel)."""
        with self._lock:
            while pid not in self._exited:
                if self._sock.fileno() < 0:
                    return -signal.SIGKILL
                if not block and not _readable(self._sock):
                    return None
                try:
                    self._receive()
                except OSError:
                    self.close()
                    return -signal.SIGKILL
            return self._exited.pop(pid)

    def _receive(self) -> None:
        message = self._sock.recv(64)
        if not message:
            raise ConnectionResetError("the converter's template process ended")
        kind, *numbers = message.decode().split()
        if kind == "pid":
            self._forked.append(int(numbers[0]))
        else:
            self._exited[int(numbers[0])] = int(numbers[1])

    def close(self) -> None:
        """Let the template go (it ends when its socket closes) and reap it."""
        if os.getpid() != self._owner:
            return
        if self._sock.fileno() >= 0:
            self._sock.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def frozen_fork() -> tuple[int, bool]:
    """``os.fork()`` with the standard streams flushed and every object so far out of the collector's reach,
    in both processes (``gc.freeze``): a full collection writes to each object's header, which copies every
    shared page into whichever process collects. The converter collects once per conversion: 0.2-0.3 s
    each, and 60-70 MiB more PSS for the build's process tree on the example and a TF1 graph (bench_build).
    Returns fork's pid and whether this call froze (False when the program had frozen its objects itself,
    and lifts that itself)."""
    sys.stdout.flush()
    sys.stderr.flush()
    froze = gc.get_freeze_count() == 0
    gc.freeze()
    return os.fork(), froze


def supported() -> bool:
    """Linux with pidfds (5.3 and later): the template waits for its workers through them."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


def _readable(sock: socket.socket) -> bool:
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(0))


def _let_go(keep: int) -> None:
    """In the template, which lives as long as the build process: its standard streams on /dev/null and no
    pipe or socket of the build process's held open (a reader of one would wait for its end as long)."""
    import stat

    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2 or fd == keep:
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)


def _serve(sock: socket.socket, become_worker: Callable[[int, int, int], None]) -> int:
    """The template's loop: fork a worker for each request, report each worker's end; return when the
    build process closes its end of the socket."""
    import selectors
    import socket

    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ, None)
        while True:
            for key, _ in selector.select():
                if key.data is None:
                    message, fds, _, _ = socket.recv_fds(sock, 64, _FDS)
                    if not message:
                        return 0
                    if message != _FORK or len(fds) != _FDS:
                        for fd in fds:
                            os.close(fd)
                        continue
                    pid = os.fork()
                    if pid == 0:  # the worker
                        try:
                            sock.close()
                            for other in list(selector.get_map().values()):
                                if other.data is not None:
                                    os.close(other.fd)
                            selector.close()
                            become_worker(*fds)
                        finally:
                            os._exit(1)
                    for fd in fds:
                        os.close(fd)
                    selector.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
                    said = f"pid {pid}"
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    _, status = os.waitpid(key.data, 0)
                    said = f"exit {key.data} {os.waitstatus_to_exitcode(status)}"
                try:
                    sock.send(said.encode())
                except OSError:  # the build process is gone
                    return 0
