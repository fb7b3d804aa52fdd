"""A build that is cancelled never loses the last good release (issue 17): real processes, real
signals, sent while the TFLite converter worker runs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO, tree

pytestmark = pytest.mark.tf


def _parents() -> dict[int, int]:
    """Each running process's parent."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def _descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    while pid > 1:
        pid = parents.get(pid, 0)
        if pid == ancestor:
            return True
    return False


def _workers(of: int) -> list[int]:
    """Process ids of the converter workers of the build ``of`` (its descendants: other builds may run on
    this machine at the same time, another test's among them): a new interpreter running the worker module,
    or the build forked (named edgeconv-worker)."""
    parents = _parents()
    found = []
    for pid in parents:
        if not _descends(pid, of, parents):
            continue
        try:
            cmd, comm = Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/comm").read_bytes()
        except OSError:
            continue
        if b"edgeconv.converters._tflite_worker" in cmd or comm.strip() == b"edgeconv-worker":
            found.append(pid)
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("released")
    shutil.copytree(REPO / "examples", root / "examples")
    shutil.copy(REPO / "pipeline.yaml", root / "pipeline.yaml")
    env = {**os.environ, "EDGECONV_NO_CACHE": "1"}
    subprocess.run([sys.executable, "-m", "edgeconv", "build", "pipeline.yaml", "-q"], cwd=root, env=env,
                   check=True, capture_output=True)
    return root


@pytest.fixture
def released(built: Path, tmp_path: Path) -> Path:
    """A copy of the example with a good release already in its output folder."""
    shutil.copytree(built, tmp_path / "p", symlinks=True)
    return tmp_path / "p"


def _build_until_the_worker_runs(project: Path, mode: str) -> tuple[subprocess.Popen[str], list[int]]:
    """``mode``: the worker forked from the build (the default on Linux) or a new interpreter (spawn)."""
    (project / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "EDGECONV_NO_CACHE": "1", "TMPDIR": str(project / "tmp"), "EDGECONV_WORKER": mode}
    proc = subprocess.Popen([sys.executable, "-m", "edgeconv", "build", "pipeline.yaml", "-q"], cwd=project,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        workers = _workers(proc.pid)
        if workers:
            forked = [Path(f"/proc/{w}/comm").read_bytes().strip() == b"edgeconv-worker" for w in workers]
            assert forked == [mode == "fork"] * len(workers)
            # One pipeline, the process's last build: its worker is the build forked, no template in between.
            assert [_parents().get(w) for w in workers] == [proc.pid] * len(workers)
            return proc, workers
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the converter worker never started")


def _gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() and b"zombie" not in _status(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _status(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/status").read_bytes().lower()
    except OSError:
        return b""


@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_sigterm_during_conversion_stops_cleanly_and_keeps_the_release(released: Path, mode: str) -> None:
    out = released / "build" / "digits"
    good = tree(out)
    proc, workers = _build_until_the_worker_runs(released, mode)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert err.strip().splitlines()[-1] == "edgeconv: terminated; the previous output is unchanged"
    assert _gone(workers)
    assert tree(out) == good
    assert sorted(p.name for p in out.parent.iterdir()) == ["digits"]  # no staging or backup folder
    assert list((released / "tmp").iterdir()) == []  # the work folder is gone too


@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_sigkill_of_edgeconv_takes_the_worker_with_it(released: Path, mode: str) -> None:
    out = released / "build" / "digits"
    good = tree(out)
    proc, workers = _build_until_the_worker_runs(released, mode)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert _gone(workers)  # the kernel's parent-death signal
    assert tree(out) == good
    # SIGKILL leaves the work folder behind; the next build removes it before its own work.
    from edgeconv.output import WORK_PREFIX, remove_stale_work_folders

    assert [p.name.startswith(WORK_PREFIX) for p in (released / "tmp").iterdir()] == [True]
    remove_stale_work_folders(released / "tmp")
    assert list((released / "tmp").iterdir()) == []


SWALLOWING_SOURCE = '''
import pathlib
import time

import numpy as np


def samples():  # called twice (counted, then drawn): waits for the signal the first time only
    if not pathlib.Path("started").exists():
        pathlib.Path("started").touch()
        try:
            time.sleep(120)
        except BaseException:  # as Keras's model loader does around its weight extraction: the exception is lost
            pathlib.Path("swallowed").touch()
    images = np.load("examples/digits/calibration.npz")["image"]
    return ({"image": image} for image in images)
'''


def test_sigterm_swallowed_by_third_party_code_still_cancels(released: Path) -> None:
    """The SIGTERM handler's exception can land in code with a bare ``except:``; the build must stop
    anyway, at its next check, and leave the release alone."""
    out = released / "build" / "digits"
    good = tree(out)
    (released / "swallow.py").write_text(SWALLOWING_SOURCE)
    text = (released / "pipeline.yaml").read_text()
    start = text.index("  source: npz")
    end = text.index("  samples: 200")
    (released / "pipeline.yaml").write_text(
        text[:start] + "  source: python\n  function: swallow:samples\n  trust_code: true\n" + text[end:])
    env = {**os.environ, "EDGECONV_NO_CACHE": "1", "TMPDIR": str(released / "tmp")}
    (released / "tmp").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "edgeconv", "build", "pipeline.yaml", "-q"], cwd=released,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (released / "started").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the calibration source never ran"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (released / "swallowed").exists()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "edgeconv: terminated; the previous output is unchanged"
    assert tree(out) == good
    assert sorted(p.name for p in out.parent.iterdir()) == ["digits"]
    assert list((released / "tmp").iterdir()) == []


def _children(pid: int) -> list[int]:
    return [child for child, parent in _parents().items() if parent == pid]


@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_sigterm_to_a_parallel_build_alone_stops_every_build_and_keeps_every_release(released: Path,
                                                                                   mode: str) -> None:
    """``build a.yaml b.yaml -j 2`` and a SIGTERM to edgeconv only (not its process group, as a job runner
    may send it) while both conversions run: each pool process's build unwinds too, instead of running on
    and replacing its release after edgeconv has said it stopped."""
    import shutil as sh

    sh.copytree(released / "build" / "digits", released / "build" / "second")
    (released / "second.yaml").write_text((released / "pipeline.yaml").read_text().replace("dir: build/digits",
                                                                                         "dir: build/second"))
    good = {name: tree(released / "build" / name) for name in ("digits", "second")}
    (released / "tmp").mkdir()
    env = {**os.environ, "EDGECONV_NO_CACHE": "1", "TMPDIR": str(released / "tmp"), "EDGECONV_WORKER": mode}
    proc = subprocess.Popen([sys.executable, "-m", "edgeconv", "build", "pipeline.yaml", "second.yaml", "-j", "2",
                             "-q"], cwd=released, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # a group of its own: the signal below reaches edgeconv alone
    try:
        deadline = time.monotonic() + 180
        while len(workers := _workers(proc.pid)) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the two converter workers never started"
            time.sleep(0.05)
        pool = _children(proc.pid)
        assert len(pool) >= 2
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "edgeconv: terminated; the previous output is unchanged"
    assert "PASS" not in out  # neither build finished
    assert _gone(workers + pool)
    assert {name: tree(released / "build" / name) for name in ("digits", "second")} == good
    assert sorted(p.name for p in (released / "build").iterdir()) == ["digits", "second"]  # no staging folders
    assert list((released / "tmp").iterdir()) == []
